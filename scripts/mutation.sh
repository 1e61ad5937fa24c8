#!/usr/bin/env bash
# Mutation testing: how many small changes to a package's code its tests
# notice. Not part of CI: a package takes minutes (audit, capability) to an
# hour (one file of runtime) on two cores.
#
#   bash scripts/mutation.sh ./audit
#   bash scripts/mutation.sh ./txn                   # txn's own files, on bbolt
#   TOOLGATE_TEST_BACKEND=postgres bash scripts/pg-test.sh run bash scripts/mutation.sh ./txn
#   bash scripts/pg-test.sh run bash scripts/mutation.sh ./txn/pgstore
#   bash scripts/mutation.sh ./txn/boltstore         # without the crash test (80 minutes alone)
#   bash scripts/mutation.sh ./runtime verify.go     # one file; runtime's other files excluded
#
# The tester is gremlins v0.6.0 with one patch (scripts/gremlins-v0.6.0.patch):
# a mutant in the condition of a `switch { case ...: }` counts as reached when
# its switch statement is, since Go's coverage blocks leave case expressions
# out (gremlins issue #298) and stock gremlins never runs those mutants; and
# GREMLINS_ONLY=FILE, a file of `file.go:LINE` lines, runs only the mutants on
# those lines (to check survivors again after a fix).
# Efficacy is killed / (killed + lived); reached is the share of mutants not
# NOT COVERED.
set -euo pipefail
cd "$(dirname "$0")/.."

pkg=${1:?usage: scripts/mutation.sh ./PKG [FILE.go]}
file=${2:-}
bin=${GREMLINS:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate/gremlins-v0.6.0-patched}

if [ ! -x "$bin" ]; then
	src=$(go mod download -json github.com/go-gremlins/gremlins@v0.6.0 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	cp -r "$src/." "$work"
	chmod -R u+w "$work"
	patch -s -d "$work" -p1 <scripts/gremlins-v0.6.0.patch
	mkdir -p "$(dirname "$bin")"
	(cd "$work" && go build -o "$bin" ./cmd/gremlins)
fi

# -count=1: a cached test result would hide a mutant.
flags=(-count=1)
args=(--workers 1 --timeout-coefficient 10)
case "$pkg" in
./txn)
	args+=(-E '^(boltstore|driver|pgstore|storetest)/') ;;
./txn/boltstore)
	flags+=(-skip=TestCrash_AtEverySync)
	args=(--workers 1 --timeout-coefficient 20) ;;
./runtime)
	flags+=(-short -skip=CrashSafety) ;;
esac
if [ -n "$file" ]; then
	others=$(cd "${pkg#./}" && ls -- *.go | grep -v '_test\.go$' | grep -vx -- "$file" | sed 's/\.go$//' | paste -sd'|')
	args+=(--exclude-files "^(${others})\.go\$")
fi
GOFLAGS="${flags[*]}" exec "$bin" unleash "${args[@]}" "$pkg"
