//go:build tools

// Package tools pins kwok (simulated nodes), built by scripts/e2e-build.sh kwok. A module
// of its own: kwok v0.8.0 wants the k8s.io libraries at v0.36, the control plane v0.37.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
