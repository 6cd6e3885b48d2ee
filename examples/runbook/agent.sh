# The stand-in for a coding agent following the triage procedure, one stage per turn: the engine
# runs the runbook as a turn per checkpoint and says which in $CRUCIBLE_RUNBOOK_STAGE (and in
# the prompt). The plan stage reads the research skill the procedure points to (in
# $CRUCIBLE_SKILL_DIR, read-only) and writes the plan; the report stage, told the plan's stage
# is done (with its hash), writes the report on it. Each answers in PLAN_TASK_RESULT.json.
set -e
grep -q "Triage a bug report" "$CRUCIBLE_PROMPT_FILE"
mkdir -p results
case "$CRUCIBLE_RUNBOOK_STAGE" in
plan)
  skill="$CRUCIBLE_SKILL_DIR/skills/research/SKILL.md"
  {
    echo "# Plan"
    echo "1. Reproduce: $(head -n 1 bug.md | sed 's/^# //')"
    echo "2. $(grep -m 1 '^Search' "$skill")"
    echo "3. Fix and test."
  } > results/plan.md
  echo '{"summary": "planned"}' > PLAN_TASK_RESULT.json
  ;;
report)
  grep -q "results/plan.md sha256:" "$CRUCIBLE_PROMPT_FILE"
  {
    echo "# Report"
    echo "The greeting is built without the comma; see results/plan.md."
  } > results/report.md
  echo '{"summary": "planned and reported"}' > PLAN_TASK_RESULT.json
  ;;
esac
