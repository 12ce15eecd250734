#!/bin/sh
# Builds and pushes gpu-stack's own precompiled NVIDIA driver image for one node image of the catalog
# (node_images/catalog.yaml) and one driver branch, tagged as NVIDIA tags its own:
# <privateImage>:<branch>-<kernel>-<osTag>. See README.md next to this script.
set -eu

usage() {
    cat <<'EOF'
usage: build.sh [options] NODE_IMAGE BRANCH

  NODE_IMAGE  a name from node_images/catalog.yaml, e.g. ubuntu22.04-6.5.0-45-generic-amd64
  BRANCH      driver branch, e.g. 580

options:
  --dry-run               print the docker commands instead of running them
  --force                 build even though NVIDIA publishes this image (e.g. its nightly skipped the kernel)
  --image REPOSITORY      push to REPOSITORY instead of the entry's privateImage
  --base-image REF        NVIDIA precompiled image to build on (default: a published catalog image of the
                          same OS, architecture and branch)
  --build-arg KEY=VALUE   extra Dockerfile build arg (TARGET_DRIVER_VERSION, KERNEL_MODULE_TYPES, UBUNTU_MIRROR)
  --sign-key FILE         module signing key (Secure Boot); needs --sign-cert
  --sign-cert FILE        X.509 certificate of the signing key
  --catalog FILE          catalog file (default: node_images/catalog.yaml)
EOF
}

die() {
    echo "build.sh: $*" >&2
    exit 1
}

HERE=$(cd -- "$(dirname -- "$0")" && pwd)
ROOT=$(cd -- "$HERE/../.." && pwd)
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

DRY_RUN=false
FORCE=false
IMAGE_OVERRIDE=""
BASE_OVERRIDE=""
EXTRA_ARGS=""
SIGN_KEY=""
SIGN_CERT=""
CATALOG="$ROOT/node_images/catalog.yaml"
ENTRY=""
WANT_BRANCH=""

need_value() {
    [ "$2" -ge 2 ] || die "$1 needs a value"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY_RUN=true; shift ;;
        --force) FORCE=true; shift ;;
        --image) need_value "$1" $#; IMAGE_OVERRIDE=$2; shift 2 ;;
        --base-image) need_value "$1" $#; BASE_OVERRIDE=$2; shift 2 ;;
        --build-arg)
            need_value "$1" $#
            case "$2" in
                [A-Z_]*=*) ;;
                *) die "--build-arg wants KEY=VALUE, got '$2'" ;;
            esac
            case "$2" in
                *[!A-Za-z0-9_=./:@%+,-]*) die "--build-arg '$2': only letters, digits and _=./:@%+,- are allowed" ;;
            esac
            EXTRA_ARGS="$EXTRA_ARGS $2"
            shift 2 ;;
        --sign-key) need_value "$1" $#; SIGN_KEY=$2; shift 2 ;;
        --sign-cert) need_value "$1" $#; SIGN_CERT=$2; shift 2 ;;
        --catalog) need_value "$1" $#; CATALOG=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *)
            if [ -z "$ENTRY" ]; then ENTRY=$1
            elif [ -z "$WANT_BRANCH" ]; then WANT_BRANCH=$1
            else usage >&2; die "unexpected argument $1"
            fi
            shift ;;
    esac
done
[ -n "$ENTRY" ] && [ -n "$WANT_BRANCH" ] || { usage >&2; exit 2; }
if [ -n "$SIGN_KEY" ] || [ -n "$SIGN_CERT" ]; then
    [ -n "$SIGN_KEY" ] && [ -n "$SIGN_CERT" ] || die "--sign-key and --sign-cert go together"
fi

# The entry as the catalog resolves it (python -m node_images.catalog shell): KEY='value' lines.
NAME="" OS_TAG="" KERNEL="" ARCH="" BRANCH="" TAG="" PUBLISHED="" REASON="" NVIDIA_REF=""
PRIVATE_IMAGE="" BASE_IMAGE="" SIBLING_ARCHES=""
vars=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m node_images.catalog --catalog "$CATALOG" \
    shell "$ENTRY" --branch "$WANT_BRANCH") || exit 2
eval "$vars"

if [ "$PUBLISHED" = true ] && [ "$FORCE" != true ]; then
    die "NVIDIA publishes $NVIDIA_REF ($NAME lies inside its precompiled matrix): pull that instead of building one.
If that tag does not exist (NVIDIA's nightly build skipped this kernel), rerun with --force."
fi
REPOSITORY=${IMAGE_OVERRIDE:-$PRIVATE_IMAGE}
[ -n "$REPOSITORY" ] || die "$NAME has no privateImage in the catalog; pass --image REPOSITORY"
BASE=${BASE_OVERRIDE:-$BASE_IMAGE}
[ -n "$BASE" ] || die "no catalog image of $OS_TAG $ARCH is published by NVIDIA for branch $BRANCH to build on;
pass --base-image with a published NVIDIA precompiled image of that OS, architecture and branch
(nvcr.io/nvidia/driver:$BRANCH-<kernel>-$OS_TAG)"

# Prints a command (quoted where needed) with --dry-run, runs it otherwise.
quote() {
    case "$1" in
        '' | *[!A-Za-z0-9_=./:@%+,-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
        *) printf '%s' "$1" ;;
    esac
}
run() {
    if [ "$DRY_RUN" = true ]; then
        line=""
        for word in "$@"; do line="$line${line:+ }$(quote "$word")"; done
        printf '%s\n' "$line"
    else
        "$@"
    fi
}

if [ "$DRY_RUN" != true ]; then
    command -v docker > /dev/null 2>&1 || die "docker is not installed (use --dry-run to see the commands)"
fi

REF="$REPOSITORY:$TAG"
ARCH_REF="$REF-$ARCH"
if [ "$PUBLISHED" = true ]; then
    echo "# $NAME, branch $BRANCH: forced private build of an image NVIDIA publishes ($NVIDIA_REF)"
else
    echo "# $NAME, branch $BRANCH: private build ($REASON)"
fi

set -- --platform "linux/$ARCH" \
    --build-arg "BASE_IMAGE=$BASE" \
    --build-arg "TARGET_KERNEL=$KERNEL" \
    --build-arg "TARGET_OS_TAG=$OS_TAG" \
    --build-arg "TARGET_DRIVER_BRANCH=$BRANCH"
for arg in $EXTRA_ARGS; do
    set -- "$@" --build-arg "$arg"
done
if [ -n "$SIGN_KEY" ]; then
    set -- "$@" --secret "id=module_signing_key,src=$SIGN_KEY" --secret "id=module_signing_cert,src=$SIGN_CERT"
fi
run docker build "$@" --tag "$ARCH_REF" --file "$HERE/Dockerfile" "$HERE"
run docker push "$ARCH_REF"

if [ "$SIBLING_ARCHES" = "$ARCH" ]; then
    # The only architecture of this kernel in the catalog: the plain tag is this image.
    run docker tag "$ARCH_REF" "$REF"
    run docker push "$REF"
    exit 0
fi

# Other architectures share this tag: it becomes a multi-architecture index of the per-architecture tags.
set -- "$ARCH_REF"
for other in $SIBLING_ARCHES; do
    [ "$other" != "$ARCH" ] || continue
    if [ "$DRY_RUN" = true ]; then
        echo "# left out at run time until $REF-$other is pushed (build.sh for the $other entry)"
        set -- "$@" "$REF-$other"
    elif docker buildx imagetools inspect "$REF-$other" > /dev/null 2>&1; then
        set -- "$@" "$REF-$other"
    else
        echo "build.sh: $REF-$other is not pushed yet; $REF covers $ARCH only until it is" >&2
    fi
done
run docker buildx imagetools create --tag "$REF" "$@"
