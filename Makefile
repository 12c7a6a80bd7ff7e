# dsq - one library (libdsq.a), thin CLIs (every programs/ds_NAME.c becomes bin/ds-NAME).
# `make help` lists the targets.
#
#   make            library + CLIs into ./bin
#   make check      the fast loop: unit tests without the quality suites
#                   (tests/test_*_quality.c), fuzz-corpus replays, the layering
#                   check and the CLI scripts not in SLOW_CLI
#   make test       everything: all unit tests, all CLI scripts, fuzz replays (CI)
#   make asan       the tests under AddressSanitizer (+UBSan); objects and CLIs in
#                   build-asan/ (bin/ stays the normal build)
#   make ubsan      the tests under UndefinedBehaviorSanitizer alone
#   make tsan       the thread pool, writer ring and server tests under ThreadSanitizer
#   make fuzz       libFuzzer targets for FUZZ_TIME seconds each (clang)
#   make bench      benchmarks (speed, not correctness)
#   make install    libdsq.a/.so, headers, dsq.pc, CLIs, man pages (PREFIX, DESTDIR)
#   make demo       convert + evaluate the bundled sample, print the results table
#   make samples    regenerate samples/ from seeds (python3-torch; slow)
#   make check-deps enforce the layering common -> formats -> quant -> tokenizer -> engine ->
#                   calib -> convert / eval
#   make format-check  clang-format (.clang-format) over the lines changed since FORMAT_BASE
#                   (default: the merge base with main)
#   make neon-check the quant tests cross-built for aarch64 under qemu (NEON kernels; slow)
#   V=1 shows commands and every test's output; WERROR=1 turns warnings into errors (CI).

CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
OUTBIN  ?= bin
OPT     ?= -O2
FUZZ_TIME ?= 20

MODULES := common formats quant xfmt tokenizer engine calib convert eval serve
INCS    := $(addprefix -I,$(MODULES)) -Iinclude -Iprograms
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral \
           -Wmissing-prototypes -Wno-missing-field-initializers \
           -Wvla -Wwrite-strings -Wundef -Wimplicit-fallthrough
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(INCS) $(CFLAGS) $(XCFLAGS) -MMD -MP
LIBS    := -lzstd -lcrypto -ljson-c -lopenblas -lpcre2-8 -lcurl -lmicrohttpd -lpthread -lm
LDFLAGS ?=

ifneq ($(V),1)
Q := @
quiet = @printf '  %-6s %s\n' $(1) $(2);
endif

# api/: the public API's facade (include/dsq/dsq.h), last in the layering
MODULES  += api

ALL_SRC  := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
# programs/: the CLIs, on top of every module (ds_NAME.c: a program's main;
# the rest: what the programs share, linked into them and not into libdsq)
MAIN_SRC := $(wildcard programs/ds_*.c)
CLI_SRC  := $(filter-out $(MAIN_SRC),$(wildcard programs/*.c))
LIB_SRC  := $(ALL_SRC)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libdsq.a
BINS     := $(foreach s,$(MAIN_SRC),$(OUTBIN)/$(subst _,-,$(notdir $(s:.c=))))

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Test helpers and fixtures (tests/fixtures: synthetic checkpoint generator,
# also linked by the benchmarks); not part of libdsq.
FIXTURE_SRC := $(wildcard tests/fixtures/*.c)
FIXTURE_OBJ := $(FIXTURE_SRC:%.c=$(BUILD)/%.o)
TEST_HELP_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c)) $(FIXTURE_SRC)
TEST_HELP_OBJ := $(TEST_HELP_SRC:%.c=$(BUILD)/%.o)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz-replay/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.SECONDARY:
.PHONY: all lib test check asan ubsan tsan fuzz bench demo samples clean check-deps neon-check format-check help
all: $(BINS)
lib: $(LIB)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

define cli_rule
$(OUTBIN)/$(subst _,-,$(notdir $(1:.c=))): $(BUILD)/$(1:.c=.o) $(CLI_OBJ) $(LIB)
	@mkdir -p $(OUTBIN)
	$$(call quiet,LINK,$$@)$$(CC) $$(ALL_CFLAGS) $$^ -o $$@ $$(LDFLAGS) $$(LIBS)
endef
$(foreach s,$(MAIN_SRC),$(eval $(call cli_rule,$(s))))

$(BUILD)/tests/%: tests/%.c $(TEST_HELP_OBJ) $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(call quiet,LINK,$@)$(CC) $(ALL_CFLAGS) -Itests -Itests/fixtures $< $(TEST_HELP_OBJ) $(CLI_OBJ) $(LIB) -o $@ $(LDFLAGS) -lcmocka $(LIBS)

# Fuzz targets double as regression tests: a tiny driver feeds them the corpus.
$(BUILD)/fuzz-replay/%: tests/fuzz/%.c tests/fuzz/replay_driver.c $(LIB)
	@mkdir -p $(dir $@)
	$(call quiet,LINK,$@)$(CC) $(ALL_CFLAGS) $< tests/fuzz/replay_driver.c $(LIB) -o $@ $(LDFLAGS) $(LIBS)

$(BUILD)/bench/%: bench/%.c $(FIXTURE_OBJ) $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(call quiet,LINK,$@)$(CC) $(ALL_CFLAGS) -Itests/fixtures $< $(FIXTURE_OBJ) $(CLI_OBJ) $(LIB) -o $@ $(LDFLAGS) $(LIBS)

test: all $(TEST_BIN) $(FUZZ_REPLAY)
	@BUILD=$(BUILD) BIN=$(OUTBIN) V=$(V) sh tests/run_all.sh $(TEST_BIN) -- $(FUZZ_REPLAY)

# make check: the loop to run while working (under two minutes on two cores).
# Left out, and run by make test: the quality suites (tests/test_*_quality.c:
# model quality on the samples, minutes of CPU), the CLI scripts in SLOW_CLI
# (each over about 20 s) and any cmocka cases matching CHECK_SKIP_CASES (a
# name pattern, none by default, handed to the tests as DSQ_TEST_SKIP:
# tests/dsq_test.c).
QUALITY_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(wildcard tests/test_*_quality.c))
CHECK_BIN   := $(filter-out $(QUALITY_BIN),$(TEST_BIN))
SLOW_CLI    ?= calib.sh export.sh export_read.sh readme.sh samples.sh serve.sh \
               recipes.sh dsa_export.sh tokenizer_parity.sh dsv32_measure.sh
CHECK_CLI   := $(filter-out $(addprefix tests/cli/,$(SLOW_CLI)),$(wildcard tests/cli/*.sh))
CHECK_SKIP_CASES ?=

check: all $(CHECK_BIN) $(FUZZ_REPLAY)
	@BUILD=$(BUILD) BIN=$(OUTBIN) V=$(V) DSQ_TEST_SKIP='$(CHECK_SKIP_CASES)' sh tests/run_all.sh \
	  --cli '$(CHECK_CLI)' \
	  $(if $(QUALITY_BIN),--note 'quality suites: $(notdir $(QUALITY_BIN))') \
	  $(if $(SLOW_CLI),--note 'slow CLI scripts: $(SLOW_CLI)') \
	  $(if $(CHECK_SKIP_CASES),--note 'cmocka cases matching $(CHECK_SKIP_CASES)') \
	  $(CHECK_BIN) -- $(FUZZ_REPLAY)

asan:
	$(MAKE) test BUILD=build-asan OUTBIN=build-asan/bin OPT=-O1 XCFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" LDFLAGS="-fsanitize=address,undefined"

ubsan:
	$(MAKE) test BUILD=build-ubsan OUTBIN=build-ubsan/bin OPT=-O1 XCFLAGS="-fsanitize=undefined -fno-sanitize-recover=undefined" LDFLAGS="-fsanitize=undefined"

# ThreadSanitizer over the code that shares memory between threads: the
# worker pool and the O_DIRECT writer ring and syncer (test_common), the
# container writer's hash-beside-compress pair and its syncer (test_container),
# and the server's HTTP threads, batch scheduler and queue (tests/cli/serve.sh
# against ds-serve and ds-eval built here; test_serve is its request parsing).
# The files holding target_clones functions are built without it: their
# ifunc resolvers run before the ThreadSanitizer runtime starts. OpenBLAS
# runs single-threaded (its own threads are not instrumented).
TSAN_TESTS ?= test_common test_container test_serve
TSAN_PLAIN := $(shell grep -l target_clones $(LIB_SRC))
TSAN_MAKE   = $(MAKE) BUILD=build-tsan OUTBIN=build-tsan/bin OPT=-O1
tsan:
	+$(TSAN_MAKE) $(TSAN_PLAIN:%.c=build-tsan/%.o) XCFLAGS="-fno-omit-frame-pointer"
	+$(TSAN_MAKE) $(addprefix build-tsan/tests/,$(TSAN_TESTS)) build-tsan/bin/ds-serve build-tsan/bin/ds-eval \
	  XCFLAGS="-fsanitize=thread -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread"
	@OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 $(TSAN_OPTIONS)" \
	  DSQ_SERVE_BIN=build-tsan/bin BUILD=build-tsan BIN=build-tsan/bin V=$(V) \
	  sh tests/run_all.sh --cli tests/cli/serve.sh $(addprefix build-tsan/tests/,$(TSAN_TESTS))

fuzz:
	@sh tests/fuzz/run_fuzz.sh $(FUZZ_TIME)

bench: all $(BENCH_BIN)
	@BUILD=$(BUILD) BIN=$(OUTBIN) sh bench/run_bench.sh

demo: all
	@sh samples/demo.sh

samples:
	@sh samples/make_samples.sh

check-deps:
	@sh tests/check_deps.sh

# clang-format (.clang-format) over the lines changed since FORMAT_BASE
# (git clang-format: the tree as a whole is not reformatted); prints the
# changes it wants, counts them and fails when there are any. One thing
# clang-format cannot keep: several statements in a one-line block
# ("if (rc < 0) { free(p); return rc; }"), which the code uses often; its
# suggestion to split such a block may be ignored.
# the default base: where this branch left main
FORMAT_BASE ?= $(shell git merge-base HEAD main 2>/dev/null || echo HEAD)
format-check:
	@command -v git-clang-format >/dev/null 2>&1 || { echo "format-check: git-clang-format not installed (clang-format)"; exit 1; }
	@out=$$(git clang-format --quiet --diff --extensions c,h $(FORMAT_BASE) -- 2>&1); \
	case "$$out" in ''|'no modified files to format'|'clang-format did not modify any files') \
	  echo "format-check: the lines changed since $(FORMAT_BASE) are formatted"; exit 0;; esac; \
	printf '%s\n' "$$out"; \
	n=$$(printf '%s\n' "$$out" | grep -c '^-[^-]'); \
	echo "format-check: $$n changed lines differ from .clang-format (git clang-format $(FORMAT_BASE) applies it)"; exit 1

help:
	@sed -n '/^#   make  /,/^#   V=1/s/^#  //p' Makefile

neon-check:
	@sh tests/neon/neon_check.sh

clean:
	rm -rf build build-asan build-ubsan build-tsan build-fuzz bin

# ---- install: libdsq.a + versioned libdsq.so, headers, dsq.pc, CLIs, man pages ----
#   make install [PREFIX=/usr/local] [DESTDIR=/staging]     make uninstall (same vars)
# Library objects are built position-independent so one set serves both
# libraries (-fno-semantic-interposition keeps in-file calls inlinable, as
# without -fPIC), and with hidden visibility: libdsq.so exports only the
# functions the public headers mark DSQ_API (api/libdsq.map keeps anything
# else local); the programs and tests link libdsq.a, where visibility does
# not matter. Only the public headers are installed, include/dsq/*.h to
# INCLUDEDIR/dsq/, and dsq.pc's Cflags name INCLUDEDIR, so programs write
# `#include <dsq/dsq.h>` and no header of the library's can shadow one of
# theirs. The SONAME carries MAJOR.MINOR while MAJOR is 0: the API may
# change between 0.x releases. Man pages are generated from each CLI's -h text.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DSQ_VER    := $(shell sed -n 's/^\#define DSQ_VERSION_STRING "\(.*\)"/\1/p' common/dsq_version.h)
SONAME     := libdsq.so.$(word 1,$(subst ., ,$(DSQ_VER))).$(word 2,$(subst ., ,$(DSQ_VER)))
SOLIB      := $(BUILD)/libdsq.so.$(DSQ_VER)
$(LIB_OBJ): ALL_CFLAGS += -fPIC -fno-semantic-interposition -fvisibility=hidden
# objects built before they were PIC with hidden visibility are rebuilt once
# (make does not track flags, and .SECONDARY keeps a stamp prerequisite from
# forcing it; a shell test, as $(wildcard) would cache the directory's
# listing from before the removal)
ifneq ($(shell test -e $(BUILD)/.pic-hidden && echo y),y)
$(shell rm -f $(LIB_OBJ) $(LIB); mkdir -p $(BUILD) && touch $(BUILD)/.pic-hidden)
endif
.PHONY: shared install uninstall
shared: $(SOLIB)

$(SOLIB): $(LIB_OBJ) api/libdsq.map
	$(call quiet,LINK,$@)$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -Wl,--version-script=api/libdsq.map \
	  $(ALL_CFLAGS) $(LIB_OBJ) -o $@ $(LDFLAGS) $(LIBS)

# dsq.pc is written at install time: it holds PREFIX, which may differ per call
install: $(BINS) $(LIB) $(SOLIB)
	@set -e; d='$(DESTDIR)'; \
	install -d "$$d$(BINDIR)" "$$d$(LIBDIR)" "$$d$(INCLUDEDIR)/dsq" "$$d$(MANDIR)/man1" "$$d$(PKGCONFIGDIR)"; \
	for b in $(BINS); do install -m 755 $$b "$$d$(BINDIR)/"; \
	  sh docs/gen_man.sh $$b '$(DSQ_VER)' > "$$d$(MANDIR)/man1/$$(basename $$b).1"; done; \
	install -m 644 $(LIB) "$$d$(LIBDIR)/libdsq.a"; \
	install -m 755 $(SOLIB) "$$d$(LIBDIR)/"; \
	ln -sf libdsq.so.$(DSQ_VER) "$$d$(LIBDIR)/$(SONAME)"; ln -sf $(SONAME) "$$d$(LIBDIR)/libdsq.so"; \
	{ echo 'prefix=$(PREFIX)'; echo 'libdir=$(LIBDIR)'; echo 'includedir=$(INCLUDEDIR)'; echo; \
	  echo 'Name: dsq'; echo 'Description: DeepSeek-V3 / Llama quantization (W8A8, W4A8, AWQ w4a16), .dsq container, CPU eval engine'; \
	  echo 'Version: $(DSQ_VER)'; echo 'Cflags: -I$${includedir}'; \
	  echo 'Libs: -L$${libdir} -ldsq $(filter -fsanitize=%,$(LDFLAGS))'; echo 'Libs.private: $(LIBS)'; } > "$$d$(PKGCONFIGDIR)/dsq.pc"; \
	install -m 644 include/dsq/*.h "$$d$(INCLUDEDIR)/dsq/"; \
	echo "installed dsq $(DSQ_VER) under $$d$(PREFIX)"

uninstall:
	@d='$(DESTDIR)'; for b in $(BINS); do n=$$(basename $$b); rm -f "$$d$(BINDIR)/$$n" "$$d$(MANDIR)/man1/$$n.1"; done; \
	rm -f "$$d$(LIBDIR)/libdsq.a" "$$d$(LIBDIR)/libdsq.so" "$$d$(LIBDIR)/$(SONAME)" "$$d$(LIBDIR)/libdsq.so.$(DSQ_VER)" \
	  "$$d$(PKGCONFIGDIR)/dsq.pc"; rm -rf "$$d$(INCLUDEDIR)/dsq"

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
