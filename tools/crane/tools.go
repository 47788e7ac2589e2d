//go:build tools

// Package tools pins go-containerregistry's crane, which assembles the container image
// without a container engine (scripts/image.sh). Built by scripts/e2e-build.sh crane.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
)
