//go:build tools

// Package tools pins the helm command this module exists to build, so that `go mod tidy`
// keeps its dependencies. Build with `scripts/e2e-build.sh helm`.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
