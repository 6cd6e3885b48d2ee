#!/bin/sh
# A stand-in for a coding agent, for the command backend: crucible hands it the rendered prompt
# in $CRUCIBLE_PROMPT and runs it in the task's workspace; it does the work and writes its one
# JSON answer to PLAN_TASK_RESULT.json, as a real harness's turn would.
set -eu
summary="$(wc -l < words.txt | tr -d ' ') words: $(tr '\n' ' ' < words.txt | sed 's/ $//')"
printf '%s\n' "$summary" > SUMMARY.md
printf '{"summary": "%s"}\n' "$summary" > PLAN_TASK_RESULT.json
