//go:build tools

// Package tools pins the binaries this module exists to build, so that `go mod tidy`
// keeps their dependencies. Build with scripts/e2e-build.sh.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
