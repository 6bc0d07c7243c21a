//go:build programs

// Package programs names the etcd scripts/setup builds for the tests' Kubernetes (its
// API server's store), so that go.mod and go.sum pin everything it imports. Debian 12's
// etcd (3.4) has no watch progress requests, which the API server's watch cache needs
// to serve watches that start with a list (client-go's and Spark's informers): with it,
// they fail over and over and clients fall back on polling.
package programs

import _ "go.etcd.io/etcd/server/v3"
