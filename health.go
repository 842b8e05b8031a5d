package sandpit

// HealthReport is what the runtime knows about its own health: whether
// containerd answers, which version, and whether each language image is
// present. It is plain data so the MCP layer can show it without importing
// anything of containerd's.
type HealthReport struct {
	ContainerdAddress string        `json:"containerd_address"`
	ContainerdVersion string        `json:"containerd_version,omitempty"`
	Namespace         string        `json:"namespace,omitempty"`
	Reachable         bool          `json:"reachable"`
	Error             string        `json:"error,omitempty"`   // why it is not reachable, with a hint
	Runtime           string        `json:"runtime,omitempty"` // the OCI runtime, e.g. "runc"
	Rootless          bool          `json:"rootless"`
	UserNamespace     bool          `json:"user_namespace"`
	Images            []ImageStatus `json:"images,omitempty"`
}

// ImageStatus says whether one language image is ready to run.
type ImageStatus struct {
	Ref     string `json:"ref"`
	Present bool   `json:"present"`
	// Versions of what the image carries, e.g. {"python": "3.11.2", "gcc": "12.2.0"}.
	Versions map[string]string `json:"versions,omitempty"`
}
