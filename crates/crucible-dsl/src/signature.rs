//! One argument table per constructor: each argument's name, type, default, whether it is
//! required, and what it is for. The compiler takes its argument names from here (the unknown
//! argument error, its did-you-mean and the positional count) and, in debug builds, checks that
//! every argument it reads is read as the type its row declares. `docs/dsl-reference.md`'s
//! argument tables are generated from these rows ([`markdown_table`]), and a test fails when
//! the document and the table disagree.

use crate::settings::{EFFORTS, HARNESSES};
use crucible_plan::WorkflowType;

/// What a constructor argument accepts, as the reference spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    Str,
    /// A path to a file or directory below the pack.
    Path,
    /// Prompt text: pack text, and launch values joined with `+`.
    Prompt,
    Int,
    Number,
    Bool,
    /// `90s`, `10m`, `2h`.
    Duration,
    /// One of the listed strings.
    OneOf(&'static [&'static str]),
    Task,
    /// A task or a list of tasks.
    Tasks,
    /// A list of tasks, some of them wrapped in `optional(...)`.
    Deps,
    /// A list of tasks only.
    TaskList,
    /// `producer.field`.
    Field,
    /// `route.question`.
    Question,
    Fields,
    StrList,
    StrOrList,
    Dict,
    Emits,
    EmitsFiles,
    Session,
    Questions,
    /// Labels of a `score()`.
    Levels,
    /// Labels of a `choice()`, or a field they are read from.
    Options,
    /// Any value (`str()`, `repr()`).
    Any,
    /// Accepted by name only to be refused with an error saying why.
    Refused,
}

/// Which typed reader of the compiler decodes an argument (`None`: read raw and decoded by
/// the constructor itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    Str,
    Int,
    Number,
    Bool,
    Duration,
    Task,
    Tasks,
    Deps,
    Field,
    Fields,
    StrList,
    StrOrList,
}

impl Ty {
    /// The spelling the reference uses.
    pub fn spelling(self) -> String {
        match self {
            Ty::Str => "str".into(),
            Ty::Path => "path".into(),
            Ty::Prompt => "str".into(),
            Ty::Int => "int".into(),
            Ty::Number => "number".into(),
            Ty::Bool => "bool".into(),
            Ty::Duration => "duration".into(),
            Ty::OneOf(xs) => xs
                .iter()
                .map(|x| format!("\"{x}\""))
                .collect::<Vec<_>>()
                .join(" \\| "),
            Ty::Task => "task".into(),
            Ty::Tasks => "task \\| list[task]".into(),
            Ty::Deps => "list[task \\| optional(task)]".into(),
            Ty::TaskList => "list[task]".into(),
            Ty::Field => "producer.field".into(),
            Ty::Question => "route.question".into(),
            Ty::Fields => "list[producer.field]".into(),
            Ty::StrList => "list[str]".into(),
            Ty::StrOrList => "str \\| list[str]".into(),
            Ty::Dict => "dict".into(),
            Ty::Emits => "list[str] \\| dict[str, type]".into(),
            Ty::EmitsFiles => "list[str] \\| dict[str, schema_file \\| None]".into(),
            Ty::Session => "session \\| str".into(),
            Ty::Questions => "dict[str, question]".into(),
            Ty::Levels => "list[str] \\| dict[str, str \\| None]".into(),
            Ty::Options => "list[str] \\| dict[str, str \\| None] \\| producer.field".into(),
            Ty::Any => "any".into(),
            Ty::Refused => "refused".into(),
        }
    }

    /// The reader that decodes this type.
    pub fn read(self) -> Option<Read> {
        match self {
            Ty::Str | Ty::Path | Ty::OneOf(_) => Some(Read::Str),
            Ty::Int => Some(Read::Int),
            Ty::Number => Some(Read::Number),
            Ty::Bool => Some(Read::Bool),
            Ty::Duration => Some(Read::Duration),
            Ty::Task => Some(Read::Task),
            Ty::Tasks => Some(Read::Tasks),
            Ty::Deps | Ty::TaskList => Some(Read::Deps),
            Ty::Field | Ty::Question => Some(Read::Field),
            Ty::Fields => Some(Read::Fields),
            Ty::StrList => Some(Read::StrList),
            Ty::StrOrList => Some(Read::StrOrList),
            Ty::Prompt
            | Ty::Dict
            | Ty::Emits
            | Ty::EmitsFiles
            | Ty::Session
            | Ty::Questions
            | Ty::Levels
            | Ty::Options
            | Ty::Any
            | Ty::Refused => None,
        }
    }
}

/// One argument's row.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    pub name: &'static str,
    pub ty: Ty,
    /// The value an absent argument means, as the reference writes it (`""`: none).
    pub default: &'static str,
    pub required: bool,
    /// Taken by position as well as by name.
    pub positional: bool,
    pub doc: &'static str,
}

const fn opt(name: &'static str, ty: Ty, default: &'static str, doc: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default,
        required: false,
        positional: false,
        doc,
    }
}

const fn req(name: &'static str, ty: Ty, doc: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default: "",
        required: true,
        positional: false,
        doc,
    }
}

const fn pos(name: &'static str, ty: Ty, required: bool, doc: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default: "",
        required,
        positional: true,
        doc,
    }
}

/// Which lanes have a constructor in scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    Every,
    /// `playbook` and `custom`.
    Routed,
    /// `autoresearch` and `custom`.
    Scored,
}

impl Lanes {
    pub fn admits(self, lane: WorkflowType) -> bool {
        match self {
            Lanes::Every => true,
            Lanes::Routed => lane != WorkflowType::Autoresearch,
            Lanes::Scored => lane != WorkflowType::Playbook,
        }
    }
}

/// One constructor's table.
#[derive(Debug)]
pub struct Ctor {
    pub name: &'static str,
    pub lanes: Lanes,
    /// The rows, in groups shared between constructors, in the order errors list them.
    pub groups: &'static [&'static [Arg]],
}

impl Ctor {
    pub fn args(&self) -> impl Iterator<Item = &'static Arg> + '_ {
        self.groups.iter().flat_map(|g| g.iter())
    }

    pub fn arg(&self, name: &str) -> Option<&'static Arg> {
        self.args().find(|a| a.name == name)
    }

    /// The names taken by position, in order.
    pub fn positional(&self) -> Vec<&'static str> {
        self.args()
            .filter(|a| a.positional)
            .map(|a| a.name)
            .collect()
    }

    /// The names taken only by keyword, in order.
    pub fn keywords(&self) -> Vec<&'static str> {
        self.args()
            .filter(|a| !a.positional)
            .map(|a| a.name)
            .collect()
    }
}

const NAME: Arg = req("name", Ty::Str, "The task's name, unique in the workflow.");

const JOINS: &[&str] = &["all", "passed", "settled"];
const STAGES: &[&str] = &["iteration", "epilogue"];
const DIRECTIONS: &[&str] = &["lower", "higher"];

/// The agent settings `agent()` and `skill()` share.
const AGENT: &[Arg] = &[
    opt("harness", Ty::OneOf(HARNESSES), "[agent]", "The agent CLI that runs the turn."),
    opt("model", Ty::Str, "[agent]", "The model the harness asks."),
    opt("effort", Ty::OneOf(EFFORTS), "[agent]", "How hard the model reasons."),
    opt("sandbox", Ty::Str, "[agent]", "A named `[agent.sandbox.<name>]` profile of the manifest."),
    opt("session", Ty::Session, "", "A `session()` whose conversation this turn continues; its settings are the task's defaults."),
    opt("repair", Ty::Int, "0", "Turns (0 to 3) that may fix an output missing a declared field or file, in the same conversation."),
];

/// The graph arguments every agent, skill, command and evaluate task shares.
const GRAPH: &[Arg] = &[
    opt(
        "depends_on",
        Ty::Deps,
        "[]",
        "Tasks whose outputs this one reads; it waits for them.",
    ),
    opt(
        "needs",
        Ty::Str,
        "\"any\"",
        "A capability the substrate must offer, such as \"decision\".",
    ),
    opt(
        "join",
        Ty::OneOf(JOINS),
        "\"all\"",
        "Which dependencies must pass before the task runs.",
    ),
    opt(
        "required",
        Ty::Bool,
        "True",
        "False makes the task advisory: its failure does not fail the run.",
    ),
    opt(
        "isolated",
        Ty::Bool,
        "False",
        "Run in a throwaway worktree; only the JSON output survives.",
    ),
    opt(
        "emits",
        Ty::Emits,
        "[]",
        "Fields the task's JSON output promises, optionally with types.",
    ),
    opt(
        "emits_files",
        Ty::EmitsFiles,
        "[]",
        "Files the task promises to write, optionally with a schema.",
    ),
    opt(
        "over",
        Ty::Field,
        "",
        "Map the task over a dependency's list field: one instance per item.",
    ),
    opt(
        "max_fanout",
        Ty::Int,
        "",
        "With `over`: most instances, 1 to 256. Required with `over`.",
    ),
    opt(
        "keyed",
        Ty::Fields,
        "[]",
        "With `over`: dependency object fields each instance gets only its own item's entry of.",
    ),
    opt(
        "revise",
        Ty::Tasks,
        "[]",
        "Tasks sent back for another round when this task fails.",
    ),
    opt(
        "max_rounds",
        Ty::Int,
        "",
        "With `revise`: most rounds, counting the first, 2 to 5. Required with `revise`.",
    ),
    opt(
        "timeout",
        Ty::Duration,
        "--max-time",
        "Longest one attempt may run.",
    ),
    opt(
        "stage",
        Ty::OneOf(STAGES),
        "\"iteration\"",
        "\"epilogue\" runs the task once after the main graph settles.",
    ),
    opt(
        "history",
        Ty::Int,
        "",
        "How many earlier runs of the launch series the task reads, 1 to 30.",
    ),
    opt(
        "when",
        Ty::Question,
        "",
        "Run only on some answers of `route.question`; else the task is not taken.",
    ),
    opt(
        "answers",
        Ty::StrOrList,
        "\"yes\"",
        "With `when`: the answers the task runs on; required unless the question is a noul.",
    ),
    opt(
        "otherwise",
        Ty::Bool,
        "False",
        "With `when`, in place of `answers`: every answer nothing else takes.",
    ),
];

const ROUTE: &[Arg] = &[
    NAME,
    req(
        "questions",
        Ty::Questions,
        "Question id to `noul()`, `choice()`, `score()` or `pick()`.",
    ),
    opt(
        "min_confidence",
        Ty::Number,
        "",
        "A decision model answers; below this probability an answer is \"uncertain\".",
    ),
    opt(
        "source",
        Ty::Task,
        "",
        "A dependency whose output answers each question under its id.",
    ),
    opt(
        "human",
        Ty::Bool,
        "False",
        "A person answers from the controller.",
    ),
    opt(
        "review",
        Ty::Path,
        "",
        "With `human`: a Markdown template shown above the evidence.",
    ),
    opt(
        "timeout",
        Ty::Duration,
        "--max-time",
        "With `human`: how long the request stays open.",
    ),
    opt(
        "files",
        Ty::StrList,
        "[]",
        "Declared JSON files of dependencies the decision model reads.",
    ),
    opt(
        "over",
        Ty::Field,
        "",
        "Decide once per item of a dependency's list field.",
    ),
    opt(
        "max_fanout",
        Ty::Int,
        "",
        "With `over`: most instances, 1 to 256.",
    ),
    opt(
        "keyed",
        Ty::Fields,
        "[]",
        "With `over`: dependency object fields split by item.",
    ),
    opt(
        "depends_on",
        Ty::Deps,
        "[]",
        "The tasks whose outputs the questions are asked about.",
    ),
    opt(
        "required",
        Ty::Bool,
        "True",
        "False makes the route advisory.",
    ),
    opt(
        "join",
        Ty::OneOf(JOINS),
        "\"all\"",
        "Which dependencies must pass before the route decides.",
    ),
    opt(
        "stage",
        Ty::OneOf(STAGES),
        "\"iteration\"",
        "As on any task.",
    ),
    opt("when", Ty::Question, "", "As on any task."),
    opt("answers", Ty::StrOrList, "\"yes\"", "As on any task."),
    opt("otherwise", Ty::Bool, "False", "As on any task."),
    opt(
        "needs",
        Ty::Str,
        "decided by the route",
        "As on any task; a model route needs \"decision\", a human one \"human\".",
    ),
];

const ASK: Arg = opt(
    "ask",
    Ty::Str,
    "\"\"",
    "The question put to whoever answers.",
);
const DROP: Arg = opt(
    "drop",
    Ty::StrOrList,
    "[]",
    "Answers that lead nowhere on purpose.",
);
const NO_REPAIR: Arg = opt(
    "repair",
    Ty::Refused,
    "",
    "Refused: only an agent's conversation can be repaired.",
);
const ENGINE_DEPS: Arg = opt("depends_on", Ty::TaskList, "[]", "Dependencies.");

/// Every constructor, by lane, in the order the reference presents them.
pub const CTORS: &[Ctor] = &[
    Ctor {
        name: "agent",
        lanes: Lanes::Every,
        groups: &[
            &[
                NAME,
                req("prompt", Ty::Prompt, "What the agent is asked to do."),
            ],
            AGENT,
            GRAPH,
        ],
    },
    Ctor {
        name: "skill",
        lanes: Lanes::Every,
        groups: &[
            &[
                NAME,
                opt(
                    "skill",
                    Ty::Path,
                    "",
                    "A directory below the pack holding SKILL.md, the prompt; one holding runbook.json runs as a runbook.",
                ),
                opt(
                    "runbook",
                    Ty::Path,
                    "",
                    "A runbook bundle below the pack: checked and sealed at compile time, its procedure is the prompt. Give `skill` or `runbook`.",
                ),
                opt(
                    "args",
                    Ty::Dict,
                    "{}",
                    "Arguments listed after the instructions.",
                ),
            ],
            AGENT,
            GRAPH,
        ],
    },
    Ctor {
        name: "command",
        lanes: Lanes::Every,
        groups: &[
            &[
                NAME,
                req(
                    "run",
                    Ty::Str,
                    "The shell command; it prints its JSON output as its last stdout line.",
                ),
                NO_REPAIR,
            ],
            GRAPH,
        ],
    },
    Ctor {
        name: "evaluate",
        lanes: Lanes::Every,
        groups: &[
            &[
                NAME,
                req(
                    "run",
                    Ty::Str,
                    "The shell command; its JSON output carries a numeric `score`.",
                ),
                opt(
                    "threshold",
                    Ty::Number,
                    "",
                    "The score the task must reach to pass.",
                ),
                opt(
                    "direction",
                    Ty::OneOf(DIRECTIONS),
                    "",
                    "Whether a lower or a higher score is better; set with `threshold`.",
                ),
                NO_REPAIR,
            ],
            GRAPH,
        ],
    },
    Ctor {
        name: "report",
        lanes: Lanes::Every,
        groups: &[&[
            NAME,
            req(
                "destination",
                Ty::Dict,
                "Where the card goes, as {\"kind\": \"slack\"}; the controller holds the endpoint.",
            ),
            opt(
                "template",
                Ty::Path,
                "",
                "A pack file rendered into the card.",
            ),
            opt(
                "result",
                Ty::Task,
                "",
                "The task whose output the card carries.",
            ),
            opt(
                "severity_field",
                Ty::Str,
                "",
                "A field of `result` (\"good\", \"warning\", \"danger\") that colours the card.",
            ),
            opt(
                "required",
                Ty::Bool,
                "True",
                "False makes the report advisory.",
            ),
        ]],
    },
    Ctor {
        name: "session",
        lanes: Lanes::Every,
        groups: &[&[
            req("name", Ty::Str, "The conversation's name."),
            opt(
                "harness",
                Ty::OneOf(HARNESSES),
                "[agent]",
                "Default harness of its tasks.",
            ),
            opt("model", Ty::Str, "[agent]", "Default model of its tasks."),
            opt(
                "effort",
                Ty::OneOf(EFFORTS),
                "[agent]",
                "Default effort of its tasks.",
            ),
        ]],
    },
    Ctor {
        name: "param",
        lanes: Lanes::Every,
        groups: &[&[pos(
            "name",
            Ty::Str,
            true,
            "A parameter the params block declares.",
        )]],
    },
    Ctor {
        name: "prompt_file",
        lanes: Lanes::Every,
        groups: &[&[pos("path", Ty::Path, true, "A UTF-8 file below the pack.")]],
    },
    Ctor {
        name: "schema_file",
        lanes: Lanes::Every,
        groups: &[&[pos(
            "path",
            Ty::Path,
            true,
            "A JSON Schema (draft 2020-12) below the pack.",
        )]],
    },
    Ctor {
        name: "optional",
        lanes: Lanes::Every,
        groups: &[&[pos(
            "task",
            Ty::Task,
            true,
            "A dependency that may be not taken.",
        )]],
    },
    Ctor {
        name: "workflow",
        lanes: Lanes::Every,
        groups: &[&[
            pos(
                "tasks",
                Ty::TaskList,
                true,
                "Every task that ships, each once.",
            ),
            opt(
                "type",
                Ty::OneOf(&["autoresearch", "custom", "playbook"]),
                "[workflow].type",
                "The lane; it must agree with the manifest.",
            ),
            opt(
                "result",
                Ty::Task,
                "",
                "The task whose output is the workflow's result.",
            ),
            opt(
                "history_record",
                Ty::Task,
                "",
                "The task whose status and fields later runs of the series read.",
            ),
        ]],
    },
    Ctor {
        name: "str",
        lanes: Lanes::Every,
        groups: &[&[pos("x", Ty::Any, true, "Any value but a launch value.")]],
    },
    Ctor {
        name: "repr",
        lanes: Lanes::Every,
        groups: &[&[pos("x", Ty::Any, true, "Any value but a launch value.")]],
    },
    Ctor {
        name: "route",
        lanes: Lanes::Routed,
        groups: &[ROUTE],
    },
    Ctor {
        name: "noul",
        lanes: Lanes::Routed,
        groups: &[&[ASK, DROP]],
    },
    Ctor {
        name: "choice",
        lanes: Lanes::Routed,
        groups: &[&[
            ASK,
            req(
                "options",
                Ty::Options,
                "Two or more labels, optionally described, or a dependency's field holding them.",
            ),
            opt(
                "multiple",
                Ty::Bool,
                "False",
                "Take one or more labels (a human route only).",
            ),
            DROP,
        ]],
    },
    Ctor {
        name: "score",
        lanes: Lanes::Routed,
        groups: &[&[
            ASK,
            req("levels", Ty::Levels, "Two or more labels, lowest first."),
            DROP,
        ]],
    },
    Ctor {
        name: "pick",
        lanes: Lanes::Routed,
        groups: &[&[
            ASK,
            req(
                "source",
                Ty::Field,
                "A list of strings a dependency emits; the person picks from it.",
            ),
            opt("multiple", Ty::Bool, "False", "Pick one or more values."),
        ]],
    },
    Ctor {
        name: "propose",
        lanes: Lanes::Scored,
        groups: &[&[
            NAME,
            ENGINE_DEPS,
            opt(
                "session",
                Ty::Session,
                "",
                "The conversation the turn continues.",
            ),
        ]],
    },
    Ctor {
        name: "apply",
        lanes: Lanes::Scored,
        groups: &[&[NAME, ENGINE_DEPS]],
    },
    Ctor {
        name: "measure",
        lanes: Lanes::Scored,
        groups: &[&[NAME, ENGINE_DEPS]],
    },
    Ctor {
        name: "grade",
        lanes: Lanes::Scored,
        groups: &[&[
            NAME,
            ENGINE_DEPS,
            opt(
                "score",
                Ty::Task,
                "",
                "The task whose score the decision uses.",
            ),
            opt("tiebreak", Ty::Task, "", "A second score that breaks ties."),
            opt(
                "evidence",
                Ty::Tasks,
                "[]",
                "Tasks folded into the measurement.",
            ),
            opt(
                "join",
                Ty::OneOf(&["all", "passed"]),
                "\"all\"",
                "Which evidence must pass.",
            ),
        ]],
    },
    Ctor {
        name: "decide",
        lanes: Lanes::Scored,
        groups: &[&[
            NAME,
            ENGINE_DEPS,
            opt(
                "measurement",
                Ty::Task,
                "",
                "The measurement ruled on; also a dependency.",
            ),
        ]],
    },
    Ctor {
        name: "top_k",
        lanes: Lanes::Scored,
        groups: &[&[
            NAME,
            req("k", Ty::Int, "How many dependencies survive, at least 1."),
            req("direction", Ty::OneOf(DIRECTIONS), "Which score wins."),
            ENGINE_DEPS,
            opt(
                "required",
                Ty::Bool,
                "True",
                "False makes the reducer advisory.",
            ),
        ]],
    },
    Ctor {
        name: "default_autoresearch",
        lanes: Lanes::Scored,
        groups: &[&[pos(
            "extra_tasks",
            Ty::TaskList,
            false,
            "Tasks added after the built-in loop.",
        )]],
    },
];

/// The table of the constructor named `name`.
pub fn ctor(name: &str) -> &'static Ctor {
    CTORS
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("`{name}` has no argument table"))
}

/// A constructor's arguments as a Markdown table, the form `docs/dsl-reference.md` holds.
pub fn markdown_table(c: &Ctor) -> String {
    let mut out = String::from(
        "| argument | type | default | required | what it is for |\n|---|---|---|---|---|\n",
    );
    for a in c.args().filter(|a| a.ty != Ty::Refused) {
        let name = if a.positional {
            format!("`{}` (or first positional)", a.name)
        } else {
            format!("`{}`", a.name)
        };
        let default = match a.default {
            "" => "—".to_string(),
            d => format!("`{d}`"),
        };
        let required = if a.required { "yes" } else { "no" };
        out.push_str(&format!(
            "| {name} | {} | {default} | {required} | {} |\n",
            a.ty.spelling(),
            a.doc.replace('|', "\\|")
        ));
    }
    for a in c.args().filter(|a| a.ty == Ty::Refused) {
        out.push_str(&format!("\n`{}`: {}\n", a.name, a.doc));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_plan::{Task, TaskKind};
    use starlark::environment::Globals;
    use std::collections::BTreeSet;

    fn names(g: &Globals) -> BTreeSet<String> {
        g.names().map(|n| n.as_str().to_string()).collect()
    }

    // Every table names a constructor the lanes it claims have in scope, and every constructor
    // a lane has in scope has a table.
    #[test]
    fn tables_match_the_registered_constructors() {
        let standard = names(&Globals::standard());
        for &lane in WorkflowType::ALL {
            let scope = names(&crate::globals(lane));
            for c in CTORS {
                assert_eq!(
                    scope.contains(c.name),
                    c.lanes.admits(lane),
                    "{}() in the {lane} lane",
                    c.name
                );
            }
            for n in scope.difference(&standard) {
                assert!(CTORS.iter().any(|c| c.name == n), "{n}() has no table");
            }
        }
    }

    // The defaults the tables state are the ones a constructed task starts from.
    #[test]
    fn stated_defaults_are_the_task_defaults() {
        let t = Task::new("t", TaskKind::Agent);
        let agent = ctor("agent");
        let stated = |n: &str| agent.arg(n).expect("declared").default;
        assert_eq!(stated("needs"), format!("\"{}\"", t.needs));
        assert_eq!(stated("join"), format!("\"{}\"", t.join));
        assert_eq!(stated("stage"), format!("\"{}\"", t.stage));
        assert_eq!(
            stated("required"),
            if t.required { "True" } else { "False" }
        );
        assert_eq!(
            stated("isolated"),
            if t.isolated { "True" } else { "False" }
        );
        assert_eq!(stated("repair"), t.repair.to_string());
    }

    #[test]
    fn names_are_unique_per_constructor() {
        for c in CTORS {
            let mut seen = BTreeSet::new();
            for a in c.args() {
                assert!(
                    seen.insert(a.name),
                    "{}() declares `{}` twice",
                    c.name,
                    a.name
                );
            }
        }
    }

    /// Replaces each `<!-- table:NAME -->` region of the reference with NAME's generated
    /// table; the names of regions that name no constructor are returned.
    fn regenerate(doc: &str) -> (String, Vec<String>) {
        let mut out = String::new();
        let mut unknown = Vec::new();
        let mut rest = doc;
        while let Some(i) = rest.find("<!-- table:") {
            let (head, tail) = rest.split_at(i);
            out.push_str(head);
            let open_end = tail.find(" -->").expect("a table marker closes") + 4;
            let name = &tail["<!-- table:".len()..open_end - 4];
            let close = tail.find("<!-- /table -->").expect("a table region closes");
            out.push_str(&tail[..open_end]);
            out.push('\n');
            match CTORS.iter().find(|c| c.name == name) {
                Some(c) => out.push_str(&markdown_table(c)),
                None => unknown.push(name.to_string()),
            }
            out.push_str("<!-- /table -->");
            rest = &tail[close + "<!-- /table -->".len()..];
        }
        out.push_str(rest);
        (out, unknown)
    }

    // docs/dsl-reference.md holds every constructor's table exactly as the compiler has it.
    // `UPDATE_REFERENCE=1` rewrites the document's tables instead of comparing them.
    #[test]
    fn reference_tables_match_the_compiler() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dsl-reference.md");
        let doc = std::fs::read_to_string(path).expect("docs/dsl-reference.md");
        let (fresh, unknown) = regenerate(&doc);
        assert!(unknown.is_empty(), "tables of no constructor: {unknown:?}");
        for c in CTORS {
            assert!(
                doc.contains(&format!("<!-- table:{} -->", c.name)),
                "docs/dsl-reference.md has no table for {}()",
                c.name
            );
        }
        if std::env::var_os("UPDATE_REFERENCE").is_some() {
            std::fs::write(path, fresh).expect("write docs/dsl-reference.md");
        } else {
            assert!(
                fresh == doc,
                "docs/dsl-reference.md's tables differ from crates/crucible-dsl/src/signature.rs: \
                 run UPDATE_REFERENCE=1 cargo test -p crucible-dsl reference"
            );
        }
    }
}
