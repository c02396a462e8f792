#!/bin/sh
# Builds the walbox image from this checkout without pulling anything:
# walbox and slotctl are compiled here with the Go toolchain into dist/image/,
# then the repository's Dockerfile (FROM scratch) copies them in.
#
#   deploy/image/build.sh                 # binaries, then the image
#   deploy/image/build.sh binaries        # only dist/image/ (for docker build .)
#
# Environment (all optional):
#   IMAGE            name:tag to build (default localhost/walbox:$VERSION)
#   VERSION          release version (default: git describe, else devel)
#   REVISION         VCS revision (default: git rev-parse HEAD, else unknown)
#   MODIFIED         true/false (default: whether git status shows changes)
#   SOURCE_DATE_EPOCH  image timestamp (default: the last commit's time)
#   BUILDER          buildah (default) or docker
#   STORAGE_DRIVER   buildah's storage driver (default vfs, which works
#                    without overlay support; podman must use the same)
#   GOARCH           target architecture (default: the machine's)
set -eu

cd "$(dirname "$0")/../.."

git_ok() { git rev-parse --git-dir >/dev/null 2>&1; }

if [ -z "${VERSION:-}" ]; then
	VERSION=$(git_ok && git describe --tags --dirty --always 2>/dev/null || echo devel)
fi
if [ -z "${REVISION:-}" ]; then
	REVISION=$(git_ok && git rev-parse HEAD 2>/dev/null || echo unknown)
fi
if [ -z "${MODIFIED:-}" ]; then
	if ! git_ok; then
		MODIFIED=unknown
	elif [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
		MODIFIED=true
	else
		MODIFIED=false
	fi
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git_ok && git log -1 --format=%ct 2>/dev/null || echo 0)
fi
export SOURCE_DATE_EPOCH
IMAGE=${IMAGE:-localhost/walbox:$(printf %s "$VERSION" | tr -c 'A-Za-z0-9_.\n-' '-')}

dist=dist/image
rm -rf "$dist"
mkdir -p "$dist"
pkg=github.com/walbox/walbox/internal/version
ldflags="-s -w -buildid= -X $pkg.version=$VERSION -X $pkg.revision=$REVISION -X $pkg.modified=$MODIFIED"
for cmd in walbox slotctl; do
	CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dist/$cmd" "./cmd/$cmd"
done
# The CA bundle of the machine (Debian: ca-certificates), for TLS to servers
# with certificates of public CAs.
cp /etc/ssl/certs/ca-certificates.crt "$dist/ca-certificates.crt"
touch -d "@$SOURCE_DATE_EPOCH" "$dist"/* 2>/dev/null || true

if [ "${1:-}" = binaries ]; then
	echo "$dist/: walbox slotctl ca-certificates.crt ($VERSION, $REVISION, modified $MODIFIED)"
	exit 0
fi

case "${BUILDER:-buildah}" in
buildah)
	# --isolation chroot: no runtime needed for a Dockerfile without RUN;
	# --timestamp: the image's and its files' dates, for a reproducible
	# digest; --pull=false: never ask a registry (scratch needs none).
	buildah --storage-driver "${STORAGE_DRIVER:-vfs}" bud --isolation chroot --pull=false \
		--timestamp "$SOURCE_DATE_EPOCH" \
		--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" \
		-f Dockerfile -t "$IMAGE" .
	;;
docker)
	docker build --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" -f Dockerfile -t "$IMAGE" .
	;;
*)
	echo "build.sh: BUILDER must be buildah or docker, not ${BUILDER}" >&2
	exit 2
	;;
esac
echo "$IMAGE"
