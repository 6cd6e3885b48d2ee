#!/usr/bin/env bash
# Installs the agent CLIs crucible drives, at the versions it is tested with (docs/agents.md),
# into a directory the project owns (default: target/agent-clis), never globally. The tests find
# them there (or under $CRUCIBLE_AGENT_CLIS); a pack names them with [agent.cli] or puts
# <dir>/node_modules/.bin on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-${CRUCIBLE_AGENT_CLIS:-target/agent-clis}}
mkdir -p "$dir"
# Keep in step with HarnessKind::package (crates/crucible-agent/src/harness/mod.rs).
npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
  @anthropic-ai/claude-code@2.1.197 \
  @openai/codex@0.171.0 \
  @mariozechner/pi-coding-agent@0.73.1
echo "agent CLIs in $dir/node_modules/.bin"
