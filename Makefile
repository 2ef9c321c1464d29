# Retort - see README.md.  `make demo` and `make test` work on a fresh Debian 12.
CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Wno-unused-parameter -Wshadow -Wformat=2
CPPFLAGS_ALL := -std=gnu11 -D_GNU_SOURCE -Icommon -Iworker

DEB_PKGS := build-essential pkg-config librdkafka-dev libhiredis-dev \
	libcurl4-openssl-dev libuv1-dev libcjson-dev libpcre2-dev \
	libmicrohttpd-dev redis-server kcat libcmocka-dev python3-pytest \
	python3-kafka python3-redis python3-jsonschema python3-fastjsonschema python3-h2 openssl docker-compose clang libclang-rt-14-dev \
	libtcmalloc-minimal4 procps

COMMON_PKGS := libcjson libpcre2-8
WORKER_PKGS := rdkafka libcurl libuv hiredis libcjson libpcre2-8
pc = $(shell pkg-config --cflags --libs $(1) 2>/dev/null)

# The allocator of the long-running programs: the worker, the floor
# clients `make bench` compares it with (so the ratio stays honest) and
# the mock LLM (glibc's malloc was 30% of its CPU with 10,000 connections
# open, and the mock shares the bench machine's two cores with the worker).
# tcmalloc (Debian's libtcmalloc-minimal4, runtime package only: hence the
# versioned name) cut the worker's CPU per job by 25-30% in paired bench
# runs: a job then made ~170 short-lived allocations (about 130 now: README), and glibc's malloc spent
# a quarter of the worker's time in them.  MALLOC=libc builds without.
MALLOC ?= tcmalloc
ifeq ($(MALLOC),tcmalloc)
MALLOC_LIB := -Wl,--push-state,--no-as-needed -l:libtcmalloc_minimal.so.4 -Wl,--pop-state
else
MALLOC_LIB :=
endif

COMMON_SRC := $(sort $(wildcard common/*.c))
WORKER_SRC := $(sort $(filter-out worker/main.c,$(wildcard worker/*.c)))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))

COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
WORKER_OBJ := $(WORKER_SRC:%.c=$(BUILD)/%.o)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/%)

ASAN_BUILD := $(BUILD)/asan
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=undefined
ASAN_COMMON_OBJ := $(COMMON_SRC:%.c=$(ASAN_BUILD)/%.o)
ASAN_WORKER_OBJ := $(WORKER_SRC:%.c=$(ASAN_BUILD)/%.o)
ASAN_UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(ASAN_BUILD)/%)

PY := /usr/bin/python3

.PHONY: all deps test unit unit-asan shared-data conformance integration integration-asan compose-check demo bench bench-schema bench-instructions fuzz clean

all: $(BUILD)/retort $(BUILD)/retort-worker $(BUILD)/mock-llm $(BUILD)/mock-kafka

# Installs the Debian packages when one is missing; quiet when all are there.
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(BUILD)/%.o: %.c $(wildcard common/*.h worker/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS) $(WARN) $(call pc,$(WORKER_PKGS) libmicrohttpd) -c $< -o $@

$(ASAN_BUILD)/%.o: %.c $(wildcard common/*.h worker/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(ASAN_FLAGS) $(WARN) $(call pc,$(WORKER_PKGS)) -c $< -o $@

# The validator (common/schema*.c) is compiled with profile feedback:
# every answer goes through it, and it is an interpreter of the compiled
# schema whose hot branches the compiler cannot guess.  `make` builds
# instrumented objects under $(PGO_BUILD), runs tests/pgo_train.c over the
# corpus in tests/pgo/ (answers with and without mistakes for
# schemas/output/ticket.v1 and product.v1 and job envelopes; not the
# bench's invoice-shaped schema), and compiles the real objects with the
# profile.  Code the training never runs is laid out as cold and compiled
# for size, so the corpus also runs every keyword, format and report path
# (tests/pgo/keywords.schema.json, at a low weight); -fprofile-partial-
# training would spare it, but also gave back half the gain of the full
# violation report.  Same code, same tests: the unit tests link these
# objects; the ASan build and the fuzzer use no profile.  PGO=0 builds
# without (the A/B of the figures in README.md).
# GCC only (its profile format and --param): another compiler builds without.
PGO ?= $(if $(filter 1,$(shell $(CC) -v 2>&1 | grep -c '^gcc version')),1,0)
PGO_BUILD := $(BUILD)/pgo
# The validator's sources (schema_cache.c, a cache of compiled schemas
# around it, is not the validator: it links jsonout).
VALIDATOR_SRC := $(filter-out common/schema_cache.c,$(filter common/schema%.c,$(COMMON_SRC)))
PGO_SRC := $(VALIDATOR_SRC)
# Functions are matched to their profile by number, not by an id that
# hashes the object's path (which differs between the two builds).
PGO_ID := --param=profile-func-internal-id=1
# With the profile to guide it, -O3 is faster here (without one it was
# slower): both compiles take it, so that the profile matches the code.
PGO_OPT := -O3
# The paths answers take (400 rounds), then the rarer keywords, only so
# that their code counts as run (20 rounds: enough not to be laid out as
# cold, too few to move the layout of the common paths).
PGO_CORPUS := schemas/output/ticket.v1.json tests/pgo/ticket.v1.jsonl \
	schemas/output/product.v1.json tests/pgo/product.v1.jsonl \
	schemas/job.schema.json tests/pgo/job.jsonl
PGO_COVER := tests/pgo/keywords.schema.json tests/pgo/keywords.jsonl
ifeq ($(PGO),1)
# Both compiles must see the same flags, or GCC refuses the profile: the
# objects depend on the Makefile too.
$(PGO_BUILD)/%.o: %.c $(wildcard common/*.h) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS) $(PGO_OPT) $(WARN) -fprofile-generate -fprofile-update=single $(PGO_ID) $(call pc,$(COMMON_PKGS)) -c $< -o $@

# Only what the validator needs besides itself (util.c, and jsonin.c, which
# reads the violations' expected/actual texts), so that a change elsewhere
# in common/ does not retrain and recompile the validator.
$(PGO_BUILD)/pgo-train: $(BUILD)/tests/pgo_train.o $(PGO_SRC:%.c=$(PGO_BUILD)/%.o) $(BUILD)/common/util.o \
		$(BUILD)/common/jsonin.o
	$(CC) $(CFLAGS) -fprofile-generate -o $@ $^ $(call pc,$(COMMON_PKGS)) -lm -lpthread

# Each object's profile lands beside its instrumented object; the final
# object looks for it beside itself, hence the copy.
$(PGO_BUILD)/trained: $(PGO_BUILD)/pgo-train $(PGO_CORPUS) $(PGO_COVER) $(wildcard schemas/events/*.json)
	rm -f $(PGO_SRC:%.c=$(PGO_BUILD)/%.gcda)
	$(PGO_BUILD)/pgo-train -r schemas https://retort.dev/schemas/ $(PGO_CORPUS) -n 20 $(PGO_COVER)
	@mkdir -p $(BUILD)/common
	for f in $(PGO_SRC:%.c=%); do cp $(PGO_BUILD)/$$f.gcda $(BUILD)/$$f.gcda; done
	touch $@

$(PGO_SRC:%.c=$(BUILD)/%.o): $(BUILD)/%.o: %.c $(wildcard common/*.h) Makefile $(PGO_BUILD)/trained
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS) $(PGO_OPT) $(WARN) -fprofile-use $(PGO_ID) $(call pc,$(COMMON_PKGS)) -c $< -o $@
endif

$(BUILD)/libretort_common.a: $(COMMON_OBJ)
	ar rcs $@ $^

$(BUILD)/retort: $(BUILD)/worker/main.o $(WORKER_OBJ) $(BUILD)/libretort_common.a
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,$(WORKER_PKGS)) -lm $(MALLOC_LIB)

$(BUILD)/retort-worker: $(BUILD)/retort
	ln -sf retort $@

$(BUILD)/mock-llm: $(BUILD)/tests/mock_llm.o $(BUILD)/common/jsonout.o $(BUILD)/common/util.o
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,libmicrohttpd libcjson libpcre2-8) -lpthread -lm $(MALLOC_LIB)

$(BUILD)/mock-kafka: $(BUILD)/tests/mock_kafka.o
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,rdkafka) -lpthread

$(BUILD)/jsts-runner: $(BUILD)/tests/jsts_runner.o $(BUILD)/libretort_common.a
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,$(COMMON_PKGS)) -lm

# test_state fails some of our own code's reallocs, as out of memory would;
$(BUILD)/test_state $(ASAN_BUILD)/test_state: TEST_LDFLAGS := -Wl,--wrap=realloc
# test_llm_api and test_config fail strdup, as out of memory would.
$(BUILD)/test_llm_api $(ASAN_BUILD)/test_llm_api $(BUILD)/test_config $(ASAN_BUILD)/test_config: \
    TEST_LDFLAGS := -Wl,--wrap=strdup

$(BUILD)/test_%: $(BUILD)/tests/unit/test_%.o $(WORKER_OBJ) $(BUILD)/libretort_common.a
	$(CC) $(CFLAGS) $(TEST_LDFLAGS) -o $@ $^ $(call pc,$(WORKER_PKGS) cmocka) -lm

$(ASAN_BUILD)/test_%: $(ASAN_BUILD)/tests/unit/test_%.o $(ASAN_WORKER_OBJ) $(ASAN_COMMON_OBJ)
	$(CC) $(ASAN_FLAGS) $(TEST_LDFLAGS) -o $@ $^ $(call pc,$(WORKER_PKGS) cmocka) -lm

# The worker itself under ASan+UBSan, for integration runs (RETORT_BIN=...).
$(ASAN_BUILD)/retort: $(ASAN_BUILD)/worker/main.o $(ASAN_WORKER_OBJ) $(ASAN_COMMON_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(call pc,$(WORKER_PKGS)) -lm

integration-asan: all $(ASAN_BUILD)/retort
	cd tests/integration && RETORT_BIN=$(CURDIR)/$(ASAN_BUILD)/retort \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(PY) -m pytest -q -p no:cacheprovider test_end_to_end.py test_validators.py test_metrics.py test_anthropic.py

# The bench's floors: a bare curl-multi client and a bare Kafka relay.
$(BUILD)/bench-curl: $(BUILD)/tests/bench_curl.o
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,libcurl libuv) $(MALLOC_LIB)

$(BUILD)/bench-relay: $(BUILD)/tests/bench_relay.o $(BUILD)/worker/sticky.o $(BUILD)/common/util.o
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,rdkafka) $(MALLOC_LIB)

# Linked like `retort` (whose `validate` and worker run the validator), with
# its allocator.
$(BUILD)/bench-schema: $(BUILD)/tests/bench_schema.o $(BUILD)/libretort_common.a
	$(CC) $(CFLAGS) -o $@ $^ $(call pc,$(COMMON_PKGS)) -lm -lpthread $(MALLOC_LIB)

# ajv + ajv-formats for the validation benchmark, into $(BUILD)/npm.  Never
# fails: without node/npm or the registry, ajv is reported as skipped.
.PHONY: bench-npm
bench-npm:
	@if ! command -v node >/dev/null || ! command -v npm >/dev/null; then \
	  echo "node/npm not found: ajv will be skipped"; \
	elif [ ! -f $(BUILD)/npm/node_modules/ajv/package.json ] || \
	     [ ! -f $(BUILD)/npm/node_modules/ajv-formats/package.json ]; then \
	  mkdir -p $(BUILD)/npm; echo "npm install ajv@8 ajv-formats@3 into $(BUILD)/npm"; \
	  timeout 300 npm install --prefix $(BUILD)/npm --no-audit --no-fund --loglevel=error \
	    ajv@8 ajv-formats@3 >$(BUILD)/npm/install.log 2>&1 || \
	  echo "npm install failed (see $(BUILD)/npm/install.log): ajv will be skipped"; \
	fi

# Retort's validator vs jsonschema, fastjsonschema and ajv on the same input.
bench-schema: $(BUILD)/bench-schema bench-npm
	BENCH_SCHEMA_BIN=$(BUILD)/bench-schema AJV_NPM_DIR=$(BUILD)/npm $(PY) tests/bench_validators.py

# libFuzzer over parse + compile + validate, for a bounded time.
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SRC := tests/fuzz_schema.c $(VALIDATOR_SRC) common/util.c common/jsonin.c
$(BUILD)/fuzz-schema: $(FUZZ_SRC) $(wildcard common/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS_ALL) -g -O1 -fsanitize=fuzzer,address,undefined -o $@ $(FUZZ_SRC) $(call pc,$(COMMON_PKGS)) -lm -lpthread

# The answer scanner of both APIs against cJSON (tests/fuzz_llm_api.c).
FUZZ_LLM_SRC := tests/fuzz_llm_api.c worker/llm_api.c worker/decide.c common/util.c common/jsonout.c
$(BUILD)/fuzz-llm-api: $(FUZZ_LLM_SRC) worker/llm_api.h worker/decide.h $(wildcard common/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS_ALL) -g -O1 -fsanitize=fuzzer,address,undefined -o $@ $(FUZZ_LLM_SRC) $(call pc,libcjson) -lm

# jsonin's parser against cJSON (tests/fuzz_jsonin.c).
FUZZ_JSONIN_SRC := tests/fuzz_jsonin.c common/jsonin.c
$(BUILD)/fuzz-jsonin: $(FUZZ_JSONIN_SRC) common/jsonin.h common/util.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS_ALL) -g -O1 -fsanitize=fuzzer,address,undefined -o $@ $(FUZZ_JSONIN_SRC) $(call pc,libcjson) -lm

fuzz: $(BUILD)/fuzz-schema $(BUILD)/jsts-runner $(BUILD)/fuzz-llm-api $(BUILD)/fuzz-jsonin
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-llm-corpus
	@[ -n "$$(ls $(BUILD)/fuzz-corpus)" ] || ./$(BUILD)/jsts-runner $(JSTS) --fuzz-corpus $(BUILD)/fuzz-corpus >/dev/null
	./$(BUILD)/fuzz-schema -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=5 -rss_limit_mb=2048 $(BUILD)/fuzz-corpus
	@[ -n "$$(ls $(BUILD)/fuzz-llm-corpus)" ] || cp $(SHARED)/llm-api/*.json $(BUILD)/fuzz-llm-corpus/
	./$(BUILD)/fuzz-llm-api -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -timeout=5 -dict=tests/fuzz_llm_api.dict $(BUILD)/fuzz-llm-corpus
	@mkdir -p $(BUILD)/fuzz-jsonin-corpus
	@[ -n "$$(ls $(BUILD)/fuzz-jsonin-corpus)" ] || cp $(SHARED)/llm-api/*.json $(BUILD)/fuzz-jsonin-corpus/
	./$(BUILD)/fuzz-jsonin -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -timeout=5 -dict=tests/fuzz_llm_api.dict $(BUILD)/fuzz-jsonin-corpus

# The unit tests read the LLM APIs' wire shapes from $(SHARED)/llm-api
# (RETORT_SHARED); without them a run would check nothing and pass.
shared-data:
	@if [ -z "$(SHARED)" ] || [ ! -d "$(SHARED)/llm-api" ]; then \
	  echo "error: no shared test data (SHARED='$(SHARED)'): it is ../shared beside the checkout," \
	       "or beside the repository it was cloned from; else run make SHARED=/path/to/shared" >&2; \
	  exit 1; fi

unit: shared-data $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; RETORT_SHARED=$(SHARED) ./$$t; done

unit-asan: shared-data $(ASAN_UNIT_BIN)
	@set -e; for t in $(ASAN_UNIT_BIN); do echo "== $$t (asan+ubsan)"; \
	  RETORT_SHARED=$(SHARED) ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ./$$t; done

# Shared test data (the JSON-Schema-Test-Suite, the LLM APIs' wire shapes)
# lives in ../shared beside the checkout; a clone made elsewhere (CI clones
# into a scratch directory) finds it beside the repository it was cloned from.
ORIGIN_DIR := $(shell git config --get remote.origin.url 2>/dev/null)
SHARED ?= $(abspath $(firstword $(wildcard ../shared $(ORIGIN_DIR)/../shared)))
JSTS ?= $(SHARED)/jsts
conformance: $(BUILD)/jsts-runner
	./$(BUILD)/jsts-runner $(JSTS)

integration: all
	cd tests/integration && $(PY) -m pytest -q -p no:cacheprovider .

# The compose file's syntax, and the image's build stage run without docker
# on only the files its Dockerfile copies.
compose-check:
	@if command -v docker-compose >/dev/null; then \
	  docker-compose -f docker/docker-compose.yml config -q && echo "docker-compose config: ok"; \
	else echo "docker-compose not installed"; exit 1; fi
	@sh tests/docker_build_check.sh .

# deps, then the rest in a make of its own: under -j a prerequisite list
# "deps all" compiled while apt-get was still installing the compiler, and
# this makefile's checks of the toolchain (PGO) ran before it was there.
test: deps
	$(MAKE) --no-print-directory all
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory unit-asan
	$(MAKE) --no-print-directory conformance
	$(MAKE) --no-print-directory compose-check
	$(MAKE) --no-print-directory integration
	$(MAKE) --no-print-directory integration-asan

demo: deps
	$(MAKE) --no-print-directory all
	$(PY) tests/demo.py

bench: deps
	$(MAKE) --no-print-directory all $(BUILD)/bench-curl $(BUILD)/bench-relay
	$(PY) tests/bench.py
	$(MAKE) --no-print-directory bench-schema

# The worker's instructions a job under callgrind, against bare curl's a
# request: a yardstick that does not move with the machine, for changes too
# small for make bench's timings (WORKERS="a/retort b/retort" compares builds).
bench-instructions: deps
	$(MAKE) --no-print-directory all $(BUILD)/bench-curl $(BUILD)/bench-relay
	@dpkg -s valgrind >/dev/null 2>&1 || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	$(PY) tests/bench_instructions.py $(foreach w,$(WORKERS),--worker $(w))

clean:
	rm -rf $(BUILD)
