#!/bin/sh
# make install into a staging directory (DESTDIR), then use it as a stranger
# would: docs/example.c built with nothing but `pkg-config --cflags --libs
# dsq` (linked against libdsq.so, run with LD_LIBRARY_PATH), and again
# against libdsq.a; its perplexity must equal ds-eval ppl's on the bundled
# sample. Also checked: only the public headers (include/dsq/*.h) are
# installed and <dsq/dsq.h> compiles alone from them; libdsq.so exports
# exactly the functions those headers declare DSQ_API, all dsq_-prefixed;
# the SONAME and its links, a man page per CLI, make uninstall leaving no file.
# Run from the repository root (make test does). Needs pkg-config and cc.
set -u
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
T=$(mktemp -d "${TMPDIR:-/tmp}/dsq-install-XXXXXX")
trap 'rm -rf "$T"' EXIT INT TERM
command -v pkg-config >/dev/null 2>&1 || { echo "install.sh: FAIL: pkg-config missing (sh .ci/deps.sh)"; exit 1; }
CC=${CC:-cc}
S=$T/stage
# BUILD and, under make asan, the sanitizer flags reach this make through
# MAKEFLAGS, so the library installed is the one the tests built
if ! make -s install DESTDIR="$S" PREFIX=/usr BUILD="${BUILD:-build}" OUTBIN="${BIN:-bin}" > "$T/make.log" 2>&1; then
  echo "FAIL: make install"; tail -20 "$T/make.log"; exit 1
fi
L=$S/usr/lib
for f in bin/ds-quant bin/ds-eval bin/ds-inspect lib/libdsq.a lib/pkgconfig/dsq.pc include/dsq/dsq.h include/dsq/dsq_status.h \
         share/man/man1/ds-quant.1 share/man/man1/ds-eval.1 share/man/man1/ds-inspect.1; do
  [ -f "$S/usr/$f" ] || fail "not installed: $f"
done
for b in bin/ds-*; do
  n=$(basename "$b")
  [ -x "$S/usr/bin/$n" ] || fail "CLI $n not installed"
  head -1 "$S/usr/share/man/man1/$n.1" 2>/dev/null | grep -q "^\.TH" || fail "man page of $n missing or not roff"
  grep -q "^\.SH SYNOPSIS" "$S/usr/share/man/man1/$n.1" 2>/dev/null || fail "man page of $n has no SYNOPSIS"
done
# the public headers and nothing else
want_h=$(cd include && ls dsq/*.h | sort | tr '\n' ' ')
got_h=$(cd "$S/usr/include" 2>/dev/null && find . -type f | sed 's,^\./,,' | sort | tr '\n' ' ')
[ "$got_h" = "$want_h" ] || fail "installed headers '$got_h', want those of include/: '$want_h'"
real=$(ls "$L"/libdsq.so.*.*.* 2>/dev/null | head -1)
[ -n "$real" ] && [ -L "$L/libdsq.so" ] || fail "libdsq.so.X.Y.Z and the libdsq.so link"
if command -v readelf >/dev/null 2>&1 && [ -n "$real" ]; then
  soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  [ -n "$soname" ] && [ -L "$L/$soname" ] || fail "SONAME '$soname' has no link in lib/"
fi

export PKG_CONFIG_PATH="$L/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$S"
flags=$(pkg-config --cflags --libs dsq) || fail "pkg-config dsq"
printf '#include <dsq/dsq.h>\nint main(void) { return dsq_scheme_name(0) == 0; }\n' > "$T/alone.c"
$CC -std=c11 -pedantic -Wall -Wextra -Werror -c "$T/alone.c" $(pkg-config --cflags dsq) -o "$T/alone.o" 2> "$T/cc.err" ||
  { fail "<dsq/dsq.h> does not compile alone from the installed headers"; head -5 "$T/cc.err"; }
# the library's include path does not hide a user's header named like one of
# its internal ones (<model.h> must be the user's: it stops the compiler)
mkdir -p "$T/own" && echo '#error "the user'"'"'s model.h"' > "$T/own/model.h"
printf '#include <dsq/dsq.h>\n#include <model.h>\n' > "$T/user.c"
$CC -std=c11 -E "$T/user.c" $(pkg-config --cflags dsq) -I"$T/own" > /dev/null 2>&1 &&
  fail "<model.h> resolved to a header of the library's, not the user's"

# libdsq.so exports the functions the public headers declare, nothing else
if command -v nm >/dev/null 2>&1 && [ -n "$real" ]; then
  nm -D --defined-only "$real" | awk '$2 ~ /^[TtWi]$/ { print $3 }' | sed 's/@.*//' | sort -u > "$T/exported"
  grep -h '^DSQ_API ' "$S/usr/include/dsq/"*.h | sed 's/(.*//; s/.*[ *]//' | sort -u > "$T/declared"
  [ -s "$T/declared" ] || fail "no DSQ_API declarations found in the installed headers"
  cmp -s "$T/exported" "$T/declared" ||
    { fail "libdsq.so exports differ from the public headers' functions"; diff "$T/declared" "$T/exported" | head -20; }
  grep -v '^dsq_' "$T/exported" | head -5 | while read -r x; do echo "FAIL: exported without the dsq_ prefix: $x"; done
  grep -q -v '^dsq_' "$T/exported" && fails=$((fails+1))
  nm -D --defined-only "$real" | awk '$2 !~ /^[TtWiA]$/ { print }' | head -3 > "$T/data"
  [ -s "$T/data" ] && { fail "libdsq.so exports data symbols"; cat "$T/data"; }
  n_exp=$(wc -l < "$T/exported")
fi

# shared: exactly pkg-config's line
if $CC docs/example.c $flags -o "$T/ex_so" 2> "$T/cc.err"; then
  ldd "$T/ex_so" 2>/dev/null | grep -q "libdsq.so" || fail "example not linked against libdsq.so"
  LD_LIBRARY_PATH="$L" "$T/ex_so" samples/tiny-dsv3 samples/data/heldout.txt 2048 > "$T/so.out" 2> "$T/run.err" ||
    { fail "example (shared) failed"; cat "$T/run.err"; }
else fail "example does not build with pkg-config --cflags --libs dsq"; head -10 "$T/cc.err"; fi
# static: libdsq.a and the private libraries dsq.pc lists
libs=$(pkg-config --static --libs dsq | sed 's/-ldsq\b//')
if $CC docs/example.c $(pkg-config --cflags dsq) "$L/libdsq.a" $libs -o "$T/ex_a" 2> "$T/cc.err"; then
  ldd "$T/ex_a" 2>/dev/null | grep -q "libdsq" && fail "static example still needs libdsq.so"
  "$T/ex_a" samples/tiny-dsv3 samples/data/heldout.txt 2048 > "$T/a.out" 2> "$T/run.err" ||
    { fail "example (static) failed"; cat "$T/run.err"; }
  cmp -s "$T/a.out" "$T/so.out" || fail "static and shared example disagree"
else fail "example does not build against libdsq.a"; head -10 "$T/cc.err"; fi
grep -q "^schemes: .*awq-w4a16" "$T/so.out" || fail "example: no scheme list: $(cat "$T/so.out")"
grep -q "^greedy: " "$T/so.out" || fail "example: no greedy continuation: $(cat "$T/so.out")"
# the API's perplexity is ds-eval's
want=$("$S/usr/bin/ds-eval" ppl -q --json -m samples/tiny-dsv3 --data samples/data/heldout.txt --limit-tokens 2048 |
       sed -n 's/.*"ppl":\([0-9.]*\).*/\1/p')
got=$(sed -n 's/^ppl \([0-9.]*\) .*/\1/p' "$T/so.out")
[ -n "$want" ] && [ "$(printf '%.6f' "$want")" = "$got" ] || fail "example ppl '$got' != ds-eval ppl '$want'"

make -s uninstall DESTDIR="$S" PREFIX=/usr BUILD="${BUILD:-build}" OUTBIN="${BIN:-bin}" > /dev/null 2>&1 || fail "make uninstall"
left=$(find "$S" ! -type d | head -5)
[ -z "$left" ] || fail "make uninstall left: $left"

if [ $fails -ne 0 ]; then echo "install.sh: $fails failure(s)"; exit 1; fi
echo "install.sh: ok (libdsq.so exports ${n_exp:-?} functions; example: $(tr '\n' ' ' < "$T/so.out"))"
