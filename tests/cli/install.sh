#!/bin/sh
# make install into a staging directory (DESTDIR), then use it as a stranger
# would: docs/example.c built with nothing but `pkg-config --cflags --libs
# dsq` (linked against libdsq.so, run with LD_LIBRARY_PATH), and again
# against libdsq.a; its perplexity must equal ds-eval ppl's on the bundled
# sample. Also checked: the SONAME and its links, a man page per CLI, dsq.h
# compiling alone from the installed headers, make uninstall leaving no file.
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
for f in bin/ds-quant bin/ds-eval bin/ds-inspect lib/libdsq.a lib/pkgconfig/dsq.pc include/dsq/dsq.h \
         share/man/man1/ds-quant.1 share/man/man1/ds-eval.1 share/man/man1/ds-inspect.1; do
  [ -f "$S/usr/$f" ] || fail "not installed: $f"
done
for b in bin/ds-*; do
  n=$(basename "$b")
  [ -x "$S/usr/bin/$n" ] || fail "CLI $n not installed"
  head -1 "$S/usr/share/man/man1/$n.1" 2>/dev/null | grep -q "^\.TH" || fail "man page of $n missing or not roff"
  grep -q "^\.SH SYNOPSIS" "$S/usr/share/man/man1/$n.1" 2>/dev/null || fail "man page of $n has no SYNOPSIS"
done
real=$(ls "$L"/libdsq.so.*.*.* 2>/dev/null | head -1)
[ -n "$real" ] && [ -L "$L/libdsq.so" ] || fail "libdsq.so.X.Y.Z and the libdsq.so link"
if command -v readelf >/dev/null 2>&1 && [ -n "$real" ]; then
  soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
  [ -n "$soname" ] && [ -L "$L/$soname" ] || fail "SONAME '$soname' has no link in lib/"
fi

export PKG_CONFIG_PATH="$L/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$S"
flags=$(pkg-config --cflags --libs dsq) || fail "pkg-config dsq"
printf '#include <dsq.h>\nint main(void) { return dsq_scheme_by_name("w4a8") == 0; }\n' > "$T/alone.c"
$CC -std=c11 -Wall -Wextra -Werror -c "$T/alone.c" $(pkg-config --cflags dsq) -o "$T/alone.o" 2> "$T/cc.err" ||
  { fail "dsq.h does not compile alone from the installed headers"; head -5 "$T/cc.err"; }

# the headers find each other: <dsq/dsq.h> needs no -I beyond the include root
printf '#include <dsq/dsq.h>\nint main(void) { return dsq_scheme_by_name("w4a8") == 0; }\n' > "$T/root.c"
$CC -std=c11 -Wall -Werror -c "$T/root.c" -I"$S/usr/include" -o "$T/root.o" 2> "$T/cc.err" ||
  { fail "<dsq/dsq.h> does not compile from the include root"; head -5 "$T/cc.err"; }

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
grep -q "awq-w4a16: .* relative error 0\.0" "$T/so.out" || fail "example: no tensor round trip: $(cat "$T/so.out")"
# the API's perplexity is ds-eval's
want=$("$S/usr/bin/ds-eval" ppl -q --json -m samples/tiny-dsv3 --data samples/data/heldout.txt --limit-tokens 2048 |
       sed -n 's/.*"ppl":\([0-9.]*\).*/\1/p')
got=$(sed -n 's/^ppl \([0-9.]*\) .*/\1/p' "$T/so.out")
[ -n "$want" ] && [ "$(printf '%.6f' "$want")" = "$got" ] || fail "example ppl '$got' != ds-eval ppl '$want'"

make -s uninstall DESTDIR="$S" PREFIX=/usr BUILD="${BUILD:-build}" OUTBIN="${BIN:-bin}" > /dev/null 2>&1 || fail "make uninstall"
left=$(find "$S" ! -type d | head -5)
[ -z "$left" ] || fail "make uninstall left: $left"

if [ $fails -ne 0 ]; then echo "install.sh: $fails failure(s)"; exit 1; fi
echo "install.sh: ok (example: $(tr '\n' ' ' < "$T/so.out"))"
