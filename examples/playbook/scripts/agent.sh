#!/bin/sh
# A stand-in for a model, run as the agent turn by the command backend. It gets the prompt in
# CRUCIBLE_PROMPT (goal, task prompt, the dependencies' results, the result instruction) and
# answers by writing one JSON object to PLAN_TASK_RESULT.json. A real harness would think here.
set -eu
case "$CRUCIBLE_TASK" in
  draft)
    # The topic arrives inside the prompt's marked region of dependency results.
    topic=$(printf '%s\n' "$CRUCIBLE_PROMPT" | sed -n 's/.*"topic": "\([^"]*\)".*/\1/p' | head -n 1)
    printf '%s\n' "${topic:-slag} cools in the yard" "a grey crust over the glow" "the furnace sleeps now" > haiku.md
    printf '{"file": "haiku.md", "lines": 3, "cost_usd": 0.01}\n' > PLAN_TASK_RESULT.json
    ;;
  review)
    printf '{"approved": true, "cost_usd": 0.01}\n' > PLAN_TASK_RESULT.json
    ;;
  *)
    printf '{"status": "fail", "note": "the stand-in does not know task %s"}\n' "$CRUCIBLE_TASK" > PLAN_TASK_RESULT.json
    ;;
esac
