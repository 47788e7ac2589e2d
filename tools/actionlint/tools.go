//go:build tools

// Package tools pins actionlint, which checks .github/workflows/ in `just lint`. Built by
// scripts/e2e-build.sh actionlint.
package tools

import (
	_ "github.com/rhysd/actionlint/cmd/actionlint"
)
