#!/bin/sh
# A stand-in for a coding agent, for the command backend: crucible hands it the rendered prompt
# in $CRUCIBLE_PROMPT and runs it in the task's workspace; it does the work the prompt asks for
# and writes its one JSON answer to PLAN_TASK_RESULT.json, as a real harness's turn would.
set -eu

if section=$(printf '%s\n' "$CRUCIBLE_PROMPT" | sed -n 's/^Section: //p' | head -n 1) && [ -n "$section" ]; then
    mkdir -p changelog
    grep -h "^$section:" notes/*.md | sed "s/^$section: */- /" > "changelog/$section.md" || true
    lines=$(wc -l < "changelog/$section.md" | tr -d ' ')
    printf '{"section": "%s", "lines": %s}\n' "$section" "$lines" > PLAN_TASK_RESULT.json
    exit 0
fi

# Assembling: the product name arrives between the external-input markers, as data.
product=$(printf '%s\n' "$CRUCIBLE_PROMPT" | sed -n '/^\[param product\]$/{n;p;}' | head -n 1)
title="Changelog for ${product:-the product}"
{
    printf '# %s\n' "$title"
    for f in changelog/*.md; do
        [ -s "$f" ] || continue
        printf '\n## %s\n\n' "$(basename "$f" .md)"
        cat "$f"
    done
} > CHANGELOG.md
words=$(wc -w < CHANGELOG.md | tr -d ' ')
printf '{"title": "%s", "words": %s}\n' "$title" "$words" > PLAN_TASK_RESULT.json
