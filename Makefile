# Reference host and conformance kit for the Takoform queue Forms.
# `make run` starts the host on its embedded default; `make test` runs every test.
GO      ?= go
DATA    ?= ./data
ADDR    ?= 127.0.0.1:8787
PKGS    := ./...
# The PostgreSQL server the torture run on PostgreSQL creates its database on (the cluster
# torture starts a private server of its own instead, -pg-private, so that it can restart it).
PGSERVER ?= postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable

.PHONY: all generate typescript build run test conform conform-cluster bench bench-quick torture fuzz vet fmt check-generated console console-vendor console-test console-screenshots console-scale check-console mutate-model conform-miniflare mutate-sample conform-rabbitmq bench-cpu

all: build

## generate: regenerate gen/, the console's Form list and features/COVERAGE.md from spec/, schemas/ and features/ (byte for byte)
generate:
	$(GO) run ./tools/specbundle -in spec/openapi.yaml -schemas schemas -out gen/api/openapi.json -forms-go gen/api/forms.gen.go -forms-ts console/web/src/forms.gen.ts
	$(GO) tool oapi-codegen -config spec/oapi-codegen.yaml gen/api/openapi.json
	@if [ -d tools/coverage ]; then $(GO) run ./tools/coverage; fi

## typescript: regenerate typescript/src/api.d.ts from gen/api/openapi.json (openapi-typescript from typescript/'s npm lock)
typescript:
	cd typescript && npm ci --no-audit --no-fund && npm run generate

## build: the host binary and the tako CLI in bin/
build:
	$(GO) build -o bin/takohost ./cmd/takohost
	$(GO) build -o bin/tako ./cmd/tako

## run: the host on loopback with its embedded file journal under $(DATA)
run:
	$(GO) run ./cmd/takohost -data $(DATA) -listen $(ADDR)

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## test: formatting, vet, a certified run of the conformance kit against an in-process host
## (every scenario, @slow and the queue checker included; results bundle in conform-results/), then every Go test
test: fmt vet
	$(GO) run ./tools/conform -certify -format progress -bundle conform-results
	$(GO) test -count=1 -timeout 12m $(PKGS)

## conform: the conformance kit (HOST=url[,url...] TOKEN=t CAPABILITIES=doc to run it against another host)
conform:
	$(GO) run ./tools/conform $(if $(HOST),-host $(HOST)) $(if $(TOKEN),-token $(TOKEN)) $(if $(CAPABILITIES),-capabilities-doc $(CAPABILITIES))

## conform-rabbitmq: the kit against an in-process host whose queues all use the RabbitMQ Offering
## (the RabbitMQ at 127.0.0.1:5672, guest/guest, rabbitmqctl on this machine; one fresh vhost per feature group)
conform-rabbitmq:
	bash .ci/conform-rabbitmq $(ARGS)

## conform-cluster: the kit against three ACTIVE in-process hosts on one fresh PostgreSQL database
## (requests round-robin, every restart a rolling restart one host at a time; about 4 minutes)
conform-cluster:
	$(GO) run ./tools/conform -format progress -store '$(PGSERVER)' -store-fresh -cluster 3

## conform-miniflare: the kit against Miniflare 4 (Cloudflare's local runtime) behind adapters/miniflare (its npm
## lock installs Miniflare and Node 22); writes docs/conformance-miniflare.md. ARGS='-tags @settlement' runs a subset.
## About 30 minutes; not part of `make test` nor of CI (adapters/miniflare/README.md says why)
conform-miniflare:
	bash adapters/miniflare/conform.sh $(ARGS)

## bench: benchmarks; writes docs/BENCHMARKS.md
bench:
	$(GO) run ./tools/bench -out docs/BENCHMARKS.md

## bench-quick: the headline verdicts (isolation, Miniflare) in about 3 minutes, for before and after a change;
## the whole report goes to bin/BENCHMARKS-quick.md, the targets table to the terminal
bench-quick:
	@mkdir -p bin
	$(GO) run ./tools/bench -quick -only isolation,miniflare -out bin/BENCHMARKS-quick.md
	@sed -n '/^## Targets/,/^## /p' bin/BENCHMARKS-quick.md | sed '$$d'

## bench-cpu: the host's own CPU per single fetch-that-sends (tools/reqcpu: hosts in child processes, the load
## generator apart), in process and sandboxed; BASE=ref also builds ref and runs its hosts interleaved, as this ÷ base;
## FLAGS="-rounds 3 -n 1000" and the like go to tools/reqcpu
bench-cpu:
	@mkdir -p bin
	$(GO) build -o bin/reqcpu ./tools/reqcpu
	$(if $(BASE),rm -rf bin/reqcpu-base-src && mkdir -p bin/reqcpu-base-src && git archive $(BASE) | tar -x -C bin/reqcpu-base-src && rm -rf bin/reqcpu-base-src/tools/reqcpu && cp -r tools/reqcpu bin/reqcpu-base-src/tools/ && cd bin/reqcpu-base-src && $(GO) build -o ../reqcpu-base ./tools/reqcpu)
	bin/reqcpu $(if $(BASE),-base bin/reqcpu-base) -profile bin/reqcpu-profiles $(FLAGS)

## torture: long crash and fault torture runs, then the independent checker (tools/jepsen): a 3-minute
## fault-free control and a 5-minute fault run on three active hosts
torture:
	TORTURE=1 $(GO) test -count=1 -timeout 60m -run 'Torture|Crash' ./runtime/...
	$(GO) run ./tools/torture -kills 60
	$(GO) run ./tools/torture -kills 30 -db-disconnects 8 -store '$(PGSERVER)'
	$(GO) run ./tools/torture -kills 30 -db-disconnects 4 -pg-private -pg-restarts 2 -cluster 3 -freezes 2
	$(GO) run ./tools/torture -hostile 60s
	$(GO) run ./tools/jepsen -control -duration 3m
	$(GO) run ./tools/jepsen -duration 5m -kills 24 -freezes 10 -pg-restarts 6 -terminates 6

## fuzz: each fuzz target for a bounded time
fuzz:
	@for p in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$p 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$p $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-30s} $$p || exit 1; \
	  done; \
	done

## mutate-model: each mutation of tools/mutate that reaches the delivery engine, against its
## model-based property test (runtime/delivery TestEngineMatchesModel) alone; prints what it kills
mutate-model:
	$(GO) run ./tools/mutate -model

## mutate-sample: the kit against a seeded random sample of go-gremlins' generated mutants of the host
## (N=100 by default, a new seed each run unless SEED= is given); writes features/MUTATIONS-SAMPLE.md
mutate-sample:
	$(GO) run ./tools/mutsample $(if $(SEED),-seed $(SEED)) $(if $(N),-n $(N)) $(if $(COVER),-cover-profile $(COVER))

## check-generated: fail when `make generate` would change gen/, features/COVERAGE.md or the console's Form list
check-generated: generate
	git diff --exit-code -- gen features/COVERAGE.md console/web/src/forms.gen.ts
	@test -z "$$(git status --porcelain -- gen features/COVERAGE.md console/web/src/forms.gen.ts)" || { git status --porcelain -- gen features/COVERAGE.md console/web/src/forms.gen.ts; echo "untracked generated files"; exit 1; }

## console: rebuild the web console's committed assets (console/dist) from console/web with esbuild's Go API (no Node.js)
console:
	$(GO) run ./console/build

## check-console: fail when console/dist is not what console/web builds to
check-console:
	$(GO) run ./console/build -check

## console-vendor: refresh the console's vendored libraries (uPlot, highlight.js) from console/e2e's npm lock
console-vendor:
	cd console/e2e && npm ci --no-audit --no-fund
	cp console/e2e/node_modules/uplot/dist/uPlot.esm.js console/e2e/node_modules/uplot/dist/uPlot.min.css console/e2e/node_modules/uplot/LICENSE console/web/vendor/uplot/
	cp console/e2e/node_modules/@highlightjs/cdn-assets/es/core.min.js console/e2e/node_modules/@highlightjs/cdn-assets/es/languages/javascript.min.js \
	  console/e2e/node_modules/@highlightjs/cdn-assets/styles/a11y-light.min.css console/e2e/node_modules/@highlightjs/cdn-assets/LICENSE console/web/vendor/highlightjs/
	$(MAKE) console

## console-test: type-check the console and run its browser tests in headless Chromium (Debian's chromium; npm ci in console/e2e)
console-test:
	cd console/e2e && npm ci --no-audit --no-fund && npx tsc -p ../web/tsconfig.json && npm test

## console-screenshots: docs/console/*.png, each main page at 1280x800
console-screenshots:
	cd console/e2e && npm ci --no-audit --no-fund && node screenshots.mjs

## console-scale: the console against 10 000 queues and a queue of 1 000 000 messages (QUEUES=, MESSAGES=); prints page timings
console-scale:
	cd console/e2e && npm ci --no-audit --no-fund && node scale.mjs
