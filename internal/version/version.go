// Package version says which build of walbox runs: the release version, the
// VCS revision and whether the tree was modified, for `walbox --version`,
// `slotctl --version` and the walbox_build_info metric.
//
// The values come from the Go toolchain's build info
// (runtime/debug.ReadBuildInfo): `go install
// github.com/walbox/walbox/cmd/walbox@v1.2.3` records the module version
// v1.2.3, and `go build` in a git checkout records vcs.revision and
// vcs.modified. A build that has neither (the image build with -trimpath
// and -buildvcs=false, a tarball without .git) sets them with the linker:
//
//	go build -ldflags "-X github.com/walbox/walbox/internal/version.version=v1.2.3 \
//	  -X github.com/walbox/walbox/internal/version.revision=$(git rev-parse HEAD) \
//	  -X github.com/walbox/walbox/internal/version.modified=false" ./cmd/walbox
//
// A value set with -X wins over the build info.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at link time with -ldflags "-X ...": see the package comment. Empty
// means "from the build info".
var (
	version  string
	revision string
	modified string
)

// Unknown is printed for a value neither the linker nor the build info
// gave: a `go run`, or a `go build` outside a VCS checkout.
const Unknown = "unknown"

// Info is one build's identity. The zero value is not meaningful; use Get.
type Info struct {
	// Version is the release (v1.2.3, a pseudo-version such as
	// v0.0.0-20260101000000-abcdef123456 for `go install ...@<commit>`), or
	// "devel" for a build from a checkout (Go's "(devel)").
	Version string
	// Revision is the VCS commit the binary was built from, or Unknown.
	Revision string
	// Modified is "true" when the checkout had uncommitted changes,
	// "false" when it had none, Unknown when not known.
	Modified string
	// GoVersion is the toolchain that built the binary (go1.26.8).
	GoVersion string
}

// Get returns the running binary's Info. It is safe for concurrent use.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(bi, version, revision, modified)
}

// resolve merges the linker's values (which win) with the build info.
func resolve(bi *debug.BuildInfo, ldVersion, ldRevision, ldModified string) Info {
	info := Info{Version: "devel", Revision: Unknown, Modified: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				if b, err := strconv.ParseBool(s.Value); err == nil {
					info.Modified = strconv.FormatBool(b)
				}
			}
		}
	}
	if ldVersion != "" {
		info.Version = ldVersion
	}
	if ldRevision != "" {
		info.Revision = ldRevision
	}
	if ldModified != "" {
		info.Modified = ldModified
	}
	return info
}

// String is the line --version prints after the program's name:
// "v1.2.3 (revision abcdef..., modified false, go1.26.8)".
func (i Info) String() string {
	return fmt.Sprintf("%s (revision %s, modified %s, %s)", i.Version, i.Revision, i.Modified, i.GoVersion)
}

// Register adds walbox_build_info to reg: a gauge that is always 1, with
// the labels version, revision, modified and goversion, so a dashboard or an
// alert can tell which build runs (join it on instance).
func Register(reg prometheus.Registerer, i Info) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "walbox_build_info",
		Help: "Always 1; the labels say which build of walbox runs: version, VCS revision, whether the tree was modified, Go version.",
	}, []string{"version", "revision", "modified", "goversion"})
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("registering walbox_build_info: %w", err)
	}
	g.WithLabelValues(i.Version, i.Revision, i.Modified, i.GoVersion).Set(1)
	return nil
}
