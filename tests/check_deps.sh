#!/bin/sh
# Layering: a module may include only headers of modules before it in
#   common -> formats -> quant -> xfmt -> tokenizer -> engine -> calib -> convert / eval -> serve
# (convert and eval are siblings: neither includes the other's headers)
# (quant never sees calib; statistics reach it as plain arrays; xfmt holds the
# serving export formats, one file each, used by engine and convert).
order="common formats quant xfmt tokenizer engine calib convert eval serve"
fail=0
rank() { i=0; for m in $order; do [ "$m" = "$1" ] && { echo $i; return; }; i=$((i+1)); done; echo 99; }
for m in $order; do
  r=$(rank $m)
  for f in $(ls $m/*.c $m/*.h 2>/dev/null | grep -v '_main\.c$'); do
    for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
      owner=""
      for o in $order; do [ -f "$o/$inc" ] && owner=$o; done
      [ -z "$owner" ] && continue
      sib=0
      { [ $m = eval ] && [ $owner = convert ]; } && sib=1
      { [ $m = convert ] && [ $owner = eval ]; } && sib=1
      if [ "$(rank $owner)" -gt "$r" ] || [ $sib = 1 ]; then
        echo "layering: $f includes $owner/$inc"; fail=1
      fi
    done
  done
done
# programs/ (the CLIs) sit on top of every module: no module includes a
# program header, so the library never prints or exits.
for m in $order; do
  for f in $(ls $m/*.c $m/*.h 2>/dev/null); do
    for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
      [ -f "programs/$inc" ] && { echo "layering: $f includes programs/$inc"; fail=1; }
    done
  done
done
[ $fail = 0 ] && echo "check-deps: layering ok"
exit $fail
