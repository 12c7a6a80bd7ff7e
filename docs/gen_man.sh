#!/bin/sh
# gen_man.sh BIN VERSION: a man page (roff, man(7)) for a dsq CLI from its -h
# text, so the page can never drift from the help (make install runs it).
# The usage block becomes SYNOPSIS, the rest DESCRIPTION, kept as
# preformatted text (the help is laid out for 80 columns already).
set -eu
bin=$1; ver=$2
name=$(basename "$bin")
help=$("$bin" -h)
# the NAME line: -h texts open with usage, not a one-line summary
case $name in
  ds-quant)   summary="convert safetensors checkpoints (BF16/FP8) to W8A8, W4A8 or AWQ w4a16 .dsq files" ;;
  ds-eval)    summary="perplexity, KL divergence and GSM8K accuracy of a model" ;;
  ds-inspect) summary="list and verify safetensors files, model directories and .dsq files" ;;
  *)          summary="a tool of the dsq quantization toolchain" ;;
esac
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'; }
printf '.TH %s 1 "" "dsq %s" "dsq manual"\n' "$(echo "$name" | tr a-z A-Z)" "$ver"
printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s\n' "$summary" | esc)"
printf '.SH SYNOPSIS\n.nf\n'
# SYNOPSIS: the usage block (from "usage:" to the first blank line)
printf '%s\n' "$help" | awk 'BEGIN{u=0} tolower($0) ~ /^usage:/ {u=1; sub(/^[Uu]sage:[ ]*/, ""); print; next}
  u && /^[ \t]*$/ {exit} u {sub(/^[ \t]+/, ""); print}' | esc
printf '.fi\n.SH DESCRIPTION\n.nf\n'
printf '%s\n' "$help" | awk 'BEGIN{u=0} tolower($0) ~ /^usage:/ {u=1; next} u && /^[ \t]*$/ {u=0; next} !u' | esc
printf '.fi\n.SH SEE ALSO\n'
printf 'README.md and docs/ of the dsq sources; pkg\\-config dsq for the library.\n'
