# Courier's commands. `make demo` and `make test` are the README's two; the rest are parts.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo
IT := $(CARGO) test -p courier-integration -- --test-threads=4
export COURIER_PHASES_FILE ?= $(CURDIR)/target/phases.txt

.PHONY: test demo deploy fmt-check clippy lint-infra unit lambda-build lambda-zips lambda-zips-test lambda-build-x86 lambda-build-x86-release it-moto it-localstack deploy-offline deps schema bench bench-lambda bench-cost bench-dlq bench-throughput smoke chaos chaos-ci classify-eval client-python

## make test: everything CI runs (format, lint, unit tests, integration on moto and LocalStack, the
## chaos suite), phase by phase with timings: scripts/test.sh.
test:
	@MAKE="$(MAKE)" scripts/test.sh

## make demo: the local run on LocalStack (SQS, S3, DynamoDB Local), moto (SES v2) and Postfix (see
## docs/local-run.md: moto's DynamoDB loses concurrent writes, which the demo's concurrent instances make).
demo:
	@scripts/install-deps.sh localstack moto smtp
	@COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh localstack -- $(CARGO) run -q -p courier-dev -- demo

## make lint-infra: sam validate --lint, cfn-lint, the IAM lint (parliament, infra/iam-lint.py) and checkov on infra/ (checkov's skips are justified next to each resource).
lint-infra:
	scripts/install-deps.sh infra sam
	SAM_CLI_TELEMETRY=0 $${COURIER_CACHE:-.cache}/venv-sam/bin/sam validate --lint --template infra/template.yaml --region us-east-1
	$${COURIER_CACHE:-.cache}/venv-infra/bin/cfn-lint infra/template.yaml
	$${COURIER_CACHE:-.cache}/venv-infra/bin/python infra/iam-lint.py infra/template.yaml
	$${COURIER_CACHE:-.cache}/venv-checkov/bin/checkov --quiet --compact --skip-download --framework cloudformation -d infra

## make deploy: sam build and sam deploy of infra/template.yaml to the AWS account of your credentials
## (guided on the first run, which writes samconfig.toml); then `courierctl --stack NAME smoke --from
## ADDRESS` (docs/runbook.md, First deploy). Needs cargo-lambda (scripts/install-deps.sh lambda).
deploy:
	scripts/install-deps.sh sam lambda
	PATH="$${COURIER_CACHE:-$(CURDIR)/.cache}/venv-lambda/bin:$$PATH" SAM_CLI_TELEMETRY=0 SAM_CLI_BETA_RUST_CARGO_LAMBDA=1 $${COURIER_CACHE:-.cache}/venv-sam/bin/sam build --template infra/template.yaml
	if [ -f samconfig.toml ]; then SAM_CLI_TELEMETRY=0 $${COURIER_CACHE:-.cache}/venv-sam/bin/sam deploy; \
	else SAM_CLI_TELEMETRY=0 $${COURIER_CACHE:-.cache}/venv-sam/bin/sam deploy --guided; fi

fmt-check:
	$(CARGO) fmt --all --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --exclude courier-integration

# The function binaries are built first: tests/tests/binary.rs runs them under a Runtime API,
# tests/tests/demo.rs runs `courier-dev demo`, tests/tests/cli.rs runs `courierctl`.
BINS := $(CARGO) build -q -p courier-send -p courier-archiver -p courier-events -p courier-unsubscribe -p courierctl -p courier-dev

## make lambda-build: what cargo-lambda builds for every crate under functions/.
## - lambda-zips: the arm64 zips in target/lambda/<bin>/bootstrap.zip with the release profile (what
##   `cargo lambda deploy` uploads, see tests/tests/deploy.rs), built in a target directory of their
##   own (target/arm64-build).
## - lambda-zips-test: the same zips with the faster `lambda-test` profile in
##   target/lambda-arm64-test/<bin>/bootstrap.zip: what the deploy test uploads in make test
##   (built in the background there, scripts/test.sh; the release build took 36 minutes in
##   the background of a fresh-clone CI run, the test profile's a few).
## - lambda-build-x86: x86_64 bootstraps in target/lambda-x86_64/<bin>/bootstrap with the faster
##   `lambda-test` profile (run here by tests/tests/binary.rs).
## `make bench-lambda` measures release x86_64 bootstraps of its own (target/lambda-x86_64-release).
LAMBDA_PKGS = $(foreach m,$(wildcard functions/*/Cargo.toml),-p courier-$(notdir $(patsubst %/Cargo.toml,%,$(m))))
CARGO_LAMBDA = PATH="$${COURIER_CACHE:-$(CURDIR)/.cache}/venv-lambda/bin:$$PATH" $(CARGO) lambda
TARGET_DIR = $(abspath $(or $(CARGO_TARGET_DIR),target))
lambda-build: lambda-zips lambda-build-x86

lambda-zips:
	@scripts/install-deps.sh lambda
	CARGO_TARGET_DIR="$(TARGET_DIR)/arm64-build" $(CARGO_LAMBDA) build -q --release --arm64 --output-format zip --lambda-dir "$(TARGET_DIR)/lambda" $(LAMBDA_PKGS)

lambda-zips-test:
	@scripts/install-deps.sh lambda
	CARGO_TARGET_DIR="$(TARGET_DIR)/arm64-build" $(CARGO_LAMBDA) build -q --profile lambda-test --arm64 --output-format zip --lambda-dir "$(TARGET_DIR)/lambda-arm64-test" $(LAMBDA_PKGS)

lambda-build-x86:
	@scripts/install-deps.sh lambda
	$(CARGO_LAMBDA) build -q --profile lambda-test --x86-64 --lambda-dir "$(TARGET_DIR)/lambda-x86_64" $(LAMBDA_PKGS)

lambda-build-x86-release:
	@scripts/install-deps.sh lambda
	$(CARGO_LAMBDA) build -q --release --x86-64 --lambda-dir "$(TARGET_DIR)/lambda-x86_64-release" $(LAMBDA_PKGS)

# The demo test runs on LocalStack only: moto's DynamoDB applies concurrent writes without
# isolation (a failed transaction restores a copy of the tables, undoing writes made meanwhile),
# and the demo runs six instances at once (see docs/local-run.md). The deploy test (cargo lambda
# deploy of the arm64 zips) runs on LocalStack only too: make test builds the zips in the
# background, and only the LocalStack phase waits for them.
it-moto: lambda-build-x86
	$(BINS)
	COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh moto -- $(IT) --skip the_demo_drives_ses_events_through_the_events_function --skip the_smoke_test_follows_each_simulator_case_to_its_end --skip cargo_lambda_deploys_every_function_as_the_template_configures_it

it-localstack: lambda-zips-test lambda-build-x86
	$(BINS)
	COURIER_LAMBDA_DIR="$(TARGET_DIR)/lambda-arm64-test" COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh localstack -- $(IT)

## make deploy-offline: the whole template, SAM-transformed locally, deployed as one CloudFormation
## stack on moto (two passes: SesEventsVia=sns and =eventbridge); every resource read back through
## its own service's API and compared with the template, then everything deleted and checked gone
## (infra/offline-deploy.py; docs/deploying.md, "Offline deploy check"). Builds nothing: it zips the
## x86_64 bootstraps `make lambda-build-x86` left (make test runs it after that phase). smtp: the
## harness always starts Postfix.
OFFLINE_BOOTSTRAPS = $(foreach m,$(wildcard functions/*/Cargo.toml),$(TARGET_DIR)/lambda-x86_64/courier-$(notdir $(patsubst %/Cargo.toml,%,$(m)))/bootstrap)
deploy-offline:
	@scripts/install-deps.sh infra moto smtp
	@for b in $(OFFLINE_BOOTSTRAPS); do [ -f "$$b" ] || { echo "deploy-offline: $$b is missing: run 'make lambda-build-x86' first" >&2; exit 1; }; done
	COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh moto -- $${COURIER_CACHE:-.cache}/venv-infra/bin/python infra/offline-deploy.py

deps:
	scripts/install-deps.sh all

## make client-python: the Python producer client's tests (clients/python: the conformance table through
## the JSON Schema and the client, batching and retries, and sending through SQS on moto), with the
## client installed (editable) into its venv.
CLIENT_PY_VENV = $${COURIER_CACHE:-.cache}/venv-client-py
client-python:
	@scripts/install-deps.sh python-client moto smtp
	$(CLIENT_PY_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e clients/python
	COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh moto -- $(CLIENT_PY_VENV)/bin/python -m pytest -q -p no:cacheprovider clients/python/tests

## make chaos [SEED=n]: the chaos suite (issue #8): 10,000 jobs, 20 SIGKILLs of the send driver,
## Postfix restarts, faults between the functions and the emulator, then every job audited. On
## LocalStack for SQS and S3, DynamoDB Local on disk for the tables (atomic conditional writes, as
## moto's are not; really restarted mid-run). `chaos-ci`: the short run.
CHAOS = $(CARGO) build -q -p courier-dev -p courier-chaos && COURIER_HARNESS_SKIP_INSTALL=1 \
	scripts/with-harness.sh localstack -- "$${CARGO_TARGET_DIR:-target}/debug/courier-chaos" \
	--dynamodb-local "$${COURIER_CACHE:-$(CURDIR)/.cache}/localstack-lib/dynamodb-local/2/DynamoDBLocal.jar"
chaos:
	@scripts/install-deps.sh localstack smtp moto
	@$(CHAOS) --jobs 10000 --kills 20 --duration 360 $(if $(SEED),--seed $(SEED))

chaos-ci:
	@$(CHAOS) --jobs 1000 --kills 5 --duration 60 --settle-deadline 600 $(if $(SEED),--seed $(SEED))

## make classify-eval: score the failure classifier on the independent evaluation corpus
## (shared/core/tests/fixtures/eval/, issue #16): retry agreement, suppression precision and recall
## for dev, validation, sealed and all, against the naive 4xx/5xx rule, a confusion table and every
## disagreement (never the sealed entries': scripts/classify-eval.py), then how far two blind
## re-annotations agree with the labels (scripts/label-agreement.py). Builds nothing: it runs
## target/debug/courierctl.
classify-eval:
	@[ -x target/debug/courierctl ] || { echo "classify-eval: target/debug/courierctl is missing: run 'cargo build -p courierctl' first" >&2; exit 2; }
	@python3 scripts/classify-eval.py --bin target/debug/courierctl
	@python3 scripts/label-agreement.py

## make schema: regenerate the published JSON Schema of the job contract, and the Python client's
## copy (a test of each side fails when it is stale).
schema:
	$(CARGO) run -q -p courierctl -- schema > schema/email-job.v1.json
	cp schema/email-job.v1.json clients/python/src/courier_client/email-job.v1.json

## make bench: print benchmark figures (medians) for the core.
bench:
	$(CARGO) run --release -q -p courier-bench --bin courier-bench

## make bench-dlq [EMULATOR=localstack]: index query latency with 100,000 letters, archive rate.
EMULATOR ?= moto
bench-dlq:
	@scripts/install-deps.sh $(EMULATOR) smtp moto
	@COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh $(EMULATOR) -- $(CARGO) run --release -q -p courier-bench --bin dlq

## make bench-throughput [EMULATOR=moto] [JOBS=n]: end-to-end jobs per second through the emulator with
## the local driver and the real pipeline, 1, 4 and 8 instances (bench/src/bin/throughput.rs).
## LocalStack by default: its DynamoDB (DynamoDB Local) keeps concurrent writes, moto's does not.
TP_EMULATOR = $(if $(filter command line environment,$(origin EMULATOR)),$(EMULATOR),localstack)
bench-throughput:
	@scripts/install-deps.sh $(TP_EMULATOR) smtp moto
	@COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh $(TP_EMULATOR) -- $(CARGO) run --release -q -p courier-bench --bin throughput -- $(or $(JOBS),1000)

## make bench-lambda: the release bootstrap through a local Lambda Runtime API (cold start, RSS, zip sizes).
bench-lambda: lambda-build lambda-build-x86-release
	@scripts/install-deps.sh moto smtp
	@COURIER_BOOTSTRAP="$${CARGO_TARGET_DIR:-target}/lambda-x86_64-release/courier-send/bootstrap" COURIER_HARNESS_SKIP_INSTALL=1 scripts/with-harness.sh moto -- bench/lambda-binary.sh 50

## make bench-cost: AWS API calls and dollars per million emails (bench/src/bin/cost.rs).
bench-cost:
	$(CARGO) run -q -p courier-bench --bin cost

smoke:
	scripts/harness-smoke.sh
