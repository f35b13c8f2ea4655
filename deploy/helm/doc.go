// Package helm holds no code: its module checks the Helm chart in
// oncegate/ without a cluster. Its tests install the chart with Helm's Go
// library for each documented values file as `helm install` does (its
// dependency check included, against a fake cluster), lint it, decode
// every rendered manifest strictly into the Kubernetes API types (an
// unknown field fails), load the rendered configuration with Oncegate's
// own loader, assert the shapes the chart promises (probes, security
// context, a grace period above the drain, replicas refused on the Badger
// ledger, the doors and their Services and Ingresses, secrets from
// Secrets), and start each values file's pod as the kubelet would: the
// real consumer binary, its args and environment, its volumes laid out as
// kubelet lays them, as the pod's user, to ready.
//
// It is a module of its own so that the main module does not take Helm's
// and Kubernetes's dependencies: run it with
//
//	cd deploy/helm && go test ./...
package helm
