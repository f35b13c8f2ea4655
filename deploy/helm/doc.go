// Package helm holds no code: its module checks the Helm chart in
// oncegate/ without a cluster. Its tests render the chart with Helm's Go
// library for each documented values file, lint it, decode every rendered
// manifest strictly into the Kubernetes API types (an unknown field
// fails), load the rendered configuration with Oncegate's own loader, and
// assert the shapes the chart promises: probes, security context, a grace
// period above the drain, replicas refused on the Badger ledger.
//
// It is a module of its own so that the main module does not take Helm's
// and Kubernetes's dependencies: run it with
//
//	cd deploy/helm && go test ./...
package helm
