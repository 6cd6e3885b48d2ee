# The stand-in for a coding agent following the triage procedure: it reads the research skill
# the procedure points to (in $CRUCIBLE_SKILL_DIR, read-only), writes the plan and the report
# the contract declares, and answers in PLAN_TASK_RESULT.json.
set -e
grep -q "Triage a bug report" "$CRUCIBLE_PROMPT_FILE"
skill="$CRUCIBLE_SKILL_DIR/skills/research/SKILL.md"
mkdir -p results
{
  echo "# Plan"
  echo "1. Reproduce: $(head -n 1 bug.md | sed 's/^# //')"
  echo "2. $(grep -m 1 '^Search' "$skill")"
  echo "3. Fix and test."
} > results/plan.md
{
  echo "# Report"
  echo "The greeting is built without the comma; see results/plan.md."
} > results/report.md
echo '{"summary": "planned and reported"}' > PLAN_TASK_RESULT.json
