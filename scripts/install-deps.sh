#!/usr/bin/env bash
# install-deps.sh [moto|localstack|smtp|infra|lambda|sam|python-client|all]...
#
# Installs what the local test harness (scripts/with-harness.sh) runs, only when it is missing,
# so a second call takes well under a second:
#   smtp       Debian's postfix (private instances only: the system service is never started)
#              and swaks (a command-line SMTP client), plus curl.
#   moto       a venv at ${COURIER_CACHE:-$REPO/.cache}/venv-moto with moto[server]==5.2.5
#   infra      venvs at ${COURIER_CACHE:-$REPO/.cache}/venv-infra with cfn-lint and parliament, and venv-checkov with
#              checkov (both for infra/template.yaml)
#              (Python from $COURIER_PYTHON, default python3; needs 3.9 or later).
#   localstack delegates to localstack/install.sh.
#   lambda     a venv at ${COURIER_CACHE:-$REPO/.cache}/venv-lambda with cargo-lambda (PyPI; it brings
#              zig): `make lambda-build` and tests/tests/deploy.rs run `cargo lambda` from its bin/.
#   sam        a venv at ${COURIER_CACHE:-$REPO/.cache}/venv-sam with SAM CLI (`make deploy`, and
#              `sam validate --lint` in `make lint-infra`).
#   python-client
#              a venv at ${COURIER_CACHE:-$REPO/.cache}/venv-client-py with the Python client's
#              dependencies and pytest (`make client-python` installs clients/python into it).
#   all        all of them (the default).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${COURIER_CACHE:-$REPO/.cache}
MOTO_SPEC='moto[server]==5.2.5'

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

APT_UPDATED=0
apt_update_if_needed() {
    # Refresh the package lists once, and only when they are missing or lack the packages asked for.
    [ "$APT_UPDATED" -eq 1 ] && return 0
    local pkg candidate need=0
    for pkg in "$@"; do
        candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
        if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then need=1; fi
    done
    if [ "$need" -eq 1 ]; then
        log "apt-get update"
        as_root apt-get -o DPkg::Lock::Timeout=300 update -qq
    fi
    APT_UPDATED=1
}

apt_install() {
    apt_update_if_needed "$@"
    log "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "$@" >&2
}

install_basics() {
    local missing=()
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    command -v python3 >/dev/null 2>&1 || missing+=(python3)
    if [ "${#missing[@]}" -gt 0 ]; then apt_install "${missing[@]}"; fi
}

install_smtp() {
    install_basics
    if [ -x /usr/lib/postfix/sbin/master ] && [ -x /usr/sbin/smtp-sink ] \
        && [ -x /usr/sbin/postmap ] && command -v swaks >/dev/null 2>&1; then
        return 0
    fi
    # "No configuration": the package writes no main.cf, so the system instance has nothing
    # to run; the harness runs its own instances from config directories of its own.
    as_root debconf-set-selections <<'EOF'
postfix postfix/main_mailer_type select No configuration
postfix postfix/mailname string courier-harness.invalid
EOF
    # Keep maintainer scripts from starting the system service during the install.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
        as_root chmod 755 "$policy"
        made_policy=1
    fi
    local rc=0
    apt_install postfix swaks || rc=$?
    if [ "$made_policy" -eq 1 ]; then as_root rm -f "$policy"; fi
    [ "$rc" -eq 0 ] || die "apt-get install postfix swaks failed (exit $rc)"

    # Never leave the system instance enabled or listening on port 25.
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now postfix.service >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null 2>&1; then
        as_root update-rc.d postfix disable >/dev/null 2>&1 || true
    fi
    if [ -s /var/spool/postfix/pid/master.pid ]; then
        local pid
        pid=$(tr -dc '0-9' </var/spool/postfix/pid/master.pid)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            log "WARNING: the system postfix (pid $pid) is running; stop it with 'postfix stop'"
        fi
    fi
    [ -x /usr/lib/postfix/sbin/master ] || die "postfix installed but /usr/lib/postfix/sbin/master is missing"
}

install_moto() {
    install_basics
    local venv=$CACHE/venv-moto stamp
    stamp=$CACHE/venv-moto/.courier-installed
    if [ -x "$venv/bin/moto_server" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$MOTO_SPEC" ]; then
        return 0
    fi
    local py=${COURIER_PYTHON:-python3}
    command -v "$py" >/dev/null 2>&1 || die "$py not found (set COURIER_PYTHON)"
    "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' \
        || die "$py is older than 3.9; moto 5.2.5 needs 3.9+ (set COURIER_PYTHON)"
    if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
        local ver
        ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        apt_install "python${ver}-venv"
    fi
    log "creating $venv with $MOTO_SPEC ($("$py" --version 2>&1))"
    rm -rf "$venv"
    mkdir -p "$CACHE"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$MOTO_SPEC" >&2
    [ -x "$venv/bin/moto_server" ] || die "pip finished but $venv/bin/moto_server is missing"
    printf '%s\n' "$MOTO_SPEC" >"$stamp"
}

# cfn-lint (with the SAM translator it brings) and checkov for infra/template.yaml, each in a
# venv of its own (checkov pins many packages of its own). checkov installs in about 75 s.
# cfn-lint and, beside it, parliament (the IAM linter infra/iam-lint.py runs on the transformed
# template with cfn-lint's decoder and SAM translator). infra/offline-deploy.py (`make
# deploy-offline`) runs in the same venv, with the boto3 parliament brings.
CFN_LINT_SPEC='cfn-lint==1.51.0 parliament==1.6.4'
CHECKOV_SPEC='checkov==3.3.30'
# SAM CLI for `make deploy` (sam build, sam deploy) and `sam validate --lint`.
SAM_SPEC='aws-sam-cli==1.170.0'

# infra_venv NAME SPEC BIN: a venv at $CACHE/NAME with SPEC, unless BIN is there with SPEC's stamp.
infra_venv() {
    local venv=$CACHE/$1 spec=$2 bin=$3 stamp
    stamp=$venv/.courier-installed
    if [ -x "$venv/bin/$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$spec" ]; then
        return 0
    fi
    local py=${COURIER_PYTHON:-python3}
    log "creating $venv with $spec"
    rm -rf "$venv"
    mkdir -p "$CACHE"
    "$py" -m venv "$venv"
    # shellcheck disable=SC2086 # a spec may name several packages
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $spec >&2
    [ -x "$venv/bin/$bin" ] || die "pip finished but $venv/bin/$bin is missing"
    printf '%s\n' "$spec" >"$stamp"
}

install_infra() {
    install_basics
    infra_venv venv-infra "$CFN_LINT_SPEC" cfn-lint
    infra_venv venv-checkov "$CHECKOV_SPEC" checkov
}

install_sam() {
    install_basics
    infra_venv venv-sam "$SAM_SPEC" sam
}

# The Python client's dependencies (clients/python/pyproject.toml), pytest, and setuptools to
# install the client itself without build isolation (no download at test time).
CLIENT_PY_SPEC='boto3==1.43.11 jsonschema==4.26.0 rfc3339-validator==0.1.4 idna==3.10 pytest==9.0.3 setuptools==80.9.0'
install_python_client() {
    install_basics
    infra_venv venv-client-py "$CLIENT_PY_SPEC" pytest
}

# cargo-lambda (and the zig it cross-compiles with) from PyPI: seconds, where `cargo install
# cargo-lambda` takes about 10 minutes.
CARGO_LAMBDA_SPEC='cargo-lambda==1.9.2'
install_lambda() {
    install_basics
    local venv=$CACHE/venv-lambda stamp
    stamp=$venv/.courier-installed
    if [ -x "$venv/bin/cargo-lambda" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$CARGO_LAMBDA_SPEC" ]; then
        return 0
    fi
    local py=${COURIER_PYTHON:-python3}
    log "creating $venv with $CARGO_LAMBDA_SPEC"
    rm -rf "$venv"
    mkdir -p "$CACHE"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$CARGO_LAMBDA_SPEC" >&2
    [ -x "$venv/bin/cargo-lambda" ] || die "pip finished but $venv/bin/cargo-lambda is missing"
    printf '%s\n' "$CARGO_LAMBDA_SPEC" >"$stamp"
}

install_localstack() {
    local script=$REPO/localstack/install.sh
    [ -f "$script" ] || die "$script does not exist (LocalStack's installer is not in the tree yet)"
    bash "$script"
}

main() {
    [ "$#" -gt 0 ] || set -- all
    local what
    for what in "$@"; do
        case $what in
            smtp) install_smtp ;;
            moto) install_moto ;;
            localstack) install_localstack ;;
            infra) install_infra ;;
            lambda) install_lambda ;;
            sam) install_sam ;;
            python-client) install_python_client ;;
            all) install_smtp; install_moto; install_localstack; install_infra; install_sam; install_lambda; install_python_client ;;
            -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
            *) die "unknown component '$what' (expected moto, localstack, smtp, infra, lambda, sam, python-client or all)" ;;
        esac
    done
}

main "$@"
