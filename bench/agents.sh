#!/usr/bin/env bash
# The agent harnesses' own overhead per turn (issue 10): each pinned CLI (scripts/install-agents.sh)
# runs a one-turn playbook against the scripted endpoint, which answers at once, so the turn's
# attempt time is the harness's cost: spawn, startup, two model round trips, exit.
#
#   bench/agents.sh            # REPS=10 bench/agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The dev profile: the figures are the CLIs' own (their startup dwarfs the engine's), and it
# reuses the test build instead of compiling every dependency again for release.
cargo bench -p crucible-cli --bench agent_turn --profile dev
