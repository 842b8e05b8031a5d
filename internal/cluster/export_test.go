package cluster

// For the integration tests, which are package cluster_test: they import
// internal/kubetest, which imports this package.
var (
	ObjectName = objectName
)
