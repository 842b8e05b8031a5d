// Package sandpit is the vocabulary every other package of sandpit shares:
// what a run asks for (Request) and what it produced (Result), the limits it
// ran under, the workspace a run sees (Workspace, View, Changes), the health
// the runtime reports, the facts every layer must agree on (where the
// workspace is mounted, who the sandbox user is, the default timeout), and
// the classes errors fall into.
//
// The guarantee: this package imports nothing of sandpit's and nothing of
// containerd's, so the MCP layer and the stores name these types without
// building against the runtime; only cmd wires the two together.
package sandpit

import "time"

// Facts every layer must agree on. Each is written here once.
const (
	// WorkspaceDir is where a run sees the workspace (bound read-write)
	// and its working directory when one is attached.
	WorkspaceDir = "/workspace"
	// SourceDir holds the run's source file, bound read-only.
	SourceDir = "/sandpit/src"
	// BuildDir holds compiler output: written by a compile step, executed
	// by the run step.
	BuildDir = "/sandpit/out"

	// EnvDir is where a run sees its workspace's package layer (bound
	// read-only; see internal/packages): Python packages in EnvDir/python
	// (on PYTHONPATH), npm packages in EnvDir/node_modules (NODE_PATH).
	EnvDir = "/opt/sandpit/env"
	// EnvPythonDir and EnvNodeDir are the import paths inside EnvDir.
	EnvPythonDir = EnvDir + "/python"
	EnvNodeDir   = EnvDir + "/node_modules"
	// ArtifactsDir (read-only) and EnvBuildDir (read-write) are what an
	// install step sees: verified artifacts, and the layer it builds. Never
	// on an import path: nothing it unpacks can be imported by the step.
	ArtifactsDir = "/opt/sandpit/artifacts"
	EnvBuildDir  = "/opt/sandpit/build"

	// SandboxUser, SandboxUID and SandboxGID are the unprivileged user
	// baked into every image sandpit builds; programs run as it.
	SandboxUser = "sandbox"
	SandboxUID  = 1000
	SandboxGID  = 1000

	// DefaultTimeout is a run's wall-clock limit when the caller gives none;
	// DefaultMaxTimeout the longest a caller may ask for unless configured.
	DefaultTimeout    = 10 * time.Second
	DefaultMaxTimeout = 60 * time.Second

	// InitAnnotation marks a sandbox whose process is sandpit's init script
	// (runtime/init.go) in the mode it names. sandpit's shim runs the
	// script's "stdin" mode as the built-in init of its seccomp loader
	// (cmd/containerd-shim-sandpit-v1/init.go); other runtimes run the
	// script.
	InitAnnotation = "org.sandpit.init"
)

// Mountpoints are the bind targets the runtime uses in every sandbox. runc
// cannot create a mountpoint in a read-only rootfs, so each must exist in
// the image.
var Mountpoints = []string{WorkspaceDir, SourceDir, BuildDir, EnvDir, ArtifactsDir, EnvBuildDir}
