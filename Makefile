# dsq - one library (libdsq.a), thin CLIs (every */NAME_main.c becomes bin/ds-NAME).
#
#   make            library + CLIs into ./bin
#   make test       unit tests (cmocka), CLI tests, fuzz-corpus replay
#   make asan       the tests under AddressSanitizer (+UBSan); objects and CLIs in
#                   build-asan/ (bin/ stays the normal build)
#   make ubsan      the tests under UndefinedBehaviorSanitizer alone
#   make fuzz       libFuzzer targets for FUZZ_TIME seconds each (clang)
#   make bench      benchmarks (speed, not correctness)
#   make demo       convert + evaluate the bundled sample, print the results table
#   make samples    regenerate samples/ from seeds (python3-torch; slow)
#   make check-deps enforce the layering common -> formats -> quant -> tokenizer -> engine ->
#                   calib -> convert / eval
#   make neon-check the quant tests cross-built for aarch64 under qemu (NEON kernels; slow)
#   V=1 shows commands; WERROR=1 turns warnings into errors (CI).

CC      ?= cc
PYTHON  ?= /usr/bin/python3
BUILD   ?= build
BINDIR  ?= bin
OPT     ?= -O2
FUZZ_TIME ?= 20

MODULES := common formats quant tokenizer engine calib convert eval
INCS    := $(addprefix -I,$(MODULES)) -Iinclude
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral \
           -Wmissing-prototypes -Wno-missing-field-initializers
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CFLAGS  ?= $(OPT) -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(INCS) $(CFLAGS) $(XCFLAGS) -MMD -MP
LIBS    := -lzstd -lcrypto -ljson-c -lopenblas -lpcre2-8 -lpthread -lm
LDFLAGS ?=

ifneq ($(V),1)
Q := @
quiet = @printf '  %-6s %s\n' $(1) $(2);
endif

ALL_SRC  := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
MAIN_SRC := $(filter %_main.c,$(ALL_SRC))
CLI_SRC  := common/cli.c
LIB_SRC  := $(filter-out %_main.c $(CLI_SRC),$(ALL_SRC))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libdsq.a
BINS     := $(foreach s,$(MAIN_SRC),$(BINDIR)/ds-$(notdir $(s:_main.c=)))

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
.PHONY: all lib test check asan ubsan fuzz bench demo samples clean check-deps neon-check
all: $(BINS)
lib: $(LIB)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(call quiet,CC,$<)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	$(call quiet,AR,$@)rm -f $@ && ar rcs $@ $^

define cli_rule
$(BINDIR)/ds-$(notdir $(1:_main.c=)): $(BUILD)/$(1:.c=.o) $(CLI_OBJ) $(LIB)
	@mkdir -p $(BINDIR)
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
	@BUILD=$(BUILD) BIN=$(BINDIR) sh tests/run_all.sh $(TEST_BIN) -- $(FUZZ_REPLAY)

check: test

asan:
	$(MAKE) test BUILD=build-asan BINDIR=build-asan/bin OPT=-O1 XCFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" LDFLAGS="-fsanitize=address,undefined"

ubsan:
	$(MAKE) test BUILD=build-ubsan BINDIR=build-ubsan/bin OPT=-O1 XCFLAGS="-fsanitize=undefined -fno-sanitize-recover=undefined" LDFLAGS="-fsanitize=undefined"

fuzz:
	@sh tests/fuzz/run_fuzz.sh $(FUZZ_TIME)

bench: all $(BENCH_BIN)
	@sh bench/run_bench.sh

demo: all
	@sh samples/demo.sh

samples:
	@sh samples/make_samples.sh

check-deps:
	@sh tests/check_deps.sh

neon-check:
	@sh tests/neon/neon_check.sh

clean:
	rm -rf build build-asan build-ubsan build-fuzz bin

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
