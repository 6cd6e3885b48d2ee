//! The Starlark values the constructors hand back. They carry indices and names only; the owned
//! plan data lives in the compile context and never crosses into Starlark.

use allocative::Allocative;
use starlark::starlark_simple_value;
use starlark::values::{
    starlark_value, Heap, NoSerialize, ProvidesStaticType, StarlarkPagable, StarlarkValue, Value,
    ValueLike,
};
use std::fmt;

/// What any conversion of an external value to text yields: never the value itself. A string
/// holding it is refused wherever it reaches a constructor.
pub const SENTINEL: &str = "\u{1}<external value: use + to place it in a prompt>\u{1}";

/// A constructed task.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct TaskRef {
    pub idx: usize,
    pub name: String,
}
starlark_simple_value!(TaskRef);

impl fmt::Display for TaskRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<task {}>", self.name)
    }
}

#[starlark_value(type = "task")]
impl<'v> StarlarkValue<'v> for TaskRef {
    /// `producer.field` and `route.question` read as field references.
    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(heap.alloc(FieldRefValue {
            idx: self.idx,
            task: self.name.clone(),
            field: attribute.to_string(),
        }))
    }

    fn has_attr(&self, _attribute: &str, _heap: Heap<'v>) -> bool {
        true
    }
}

/// `producer.field`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct FieldRefValue {
    pub idx: usize,
    pub task: String,
    pub field: String,
}
starlark_simple_value!(FieldRefValue);

impl fmt::Display for FieldRefValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.task, self.field)
    }
}

#[starlark_value(type = "field")]
impl<'v> StarlarkValue<'v> for FieldRefValue {}

/// `optional(task)`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct OptionalDep {
    pub idx: usize,
    pub name: String,
}
starlark_simple_value!(OptionalDep);

impl fmt::Display for OptionalDep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "optional({})", self.name)
    }
}

#[starlark_value(type = "optional")]
impl<'v> StarlarkValue<'v> for OptionalDep {}

/// `session(...)`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct SessionValue {
    pub name: String,
    pub harness: Option<String>,
    pub model: Option<String>,
    pub effort: Option<String>,
}
starlark_simple_value!(SessionValue);

impl fmt::Display for SessionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<session {}>", self.name)
    }
}

#[starlark_value(type = "session")]
impl<'v> StarlarkValue<'v> for SessionValue {}

/// A question for `route()`; the question itself is in the context under `idx`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct QuestionValue {
    pub idx: usize,
}
starlark_simple_value!(QuestionValue);

impl fmt::Display for QuestionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<question>")
    }
}

#[starlark_value(type = "question")]
impl<'v> StarlarkValue<'v> for QuestionValue {}

/// A `schema_file(...)`; the schema is in the context under `idx`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct SchemaValue {
    pub idx: usize,
    pub path: String,
}
starlark_simple_value!(SchemaValue);

impl fmt::Display for SchemaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<schema {}>", self.path)
    }
}

#[starlark_value(type = "schema")]
impl<'v> StarlarkValue<'v> for SchemaValue {}

/// The value of `workflow(...)`.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct WorkflowValue;
starlark_simple_value!(WorkflowValue);

impl fmt::Display for WorkflowValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<workflow>")
    }
}

#[starlark_value(type = "workflow")]
impl<'v> StarlarkValue<'v> for WorkflowValue {}

/// One span of a marked text: pack text, or a value from outside the pack.
#[derive(Clone, Debug, StarlarkPagable, Allocative)]
pub struct Part {
    /// `None` for pack text; the origin (`param topic`) for an external value.
    pub origin: Option<String>,
    pub text: String,
}

/// Text holding at least one value from outside the pack. Only `+` works on it; every
/// conversion to plain text yields [`SENTINEL`], never the value.
#[derive(Debug, ProvidesStaticType, NoSerialize, StarlarkPagable, Allocative)]
pub struct Marked {
    pub parts: Vec<Part>,
}
starlark_simple_value!(Marked);

impl fmt::Display for Marked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SENTINEL)
    }
}

impl Marked {
    fn joined(&self, other: Value<'_>, self_first: bool) -> Option<Marked> {
        let other_parts: Vec<Part> = if let Some(s) = other.unpack_str() {
            vec![Part {
                origin: None,
                text: s.to_string(),
            }]
        } else if let Some(m) = other.downcast_ref::<Marked>() {
            m.parts.clone()
        } else {
            return None;
        };
        let mut parts = Vec::new();
        if self_first {
            parts.extend(self.parts.iter().cloned());
            parts.extend(other_parts);
        } else {
            parts.extend(other_parts);
            parts.extend(self.parts.iter().cloned());
        }
        Some(Marked { parts })
    }
}

#[starlark_value(type = "external_value")]
impl<'v> StarlarkValue<'v> for Marked {
    fn collect_repr(&self, collector: &mut String) {
        collector.push_str(SENTINEL);
    }

    fn add(&self, rhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        self.joined(rhs, true).map(|m| Ok(heap.alloc(m)))
    }

    fn radd(&self, lhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        self.joined(lhs, false).map(|m| Ok(heap.alloc(m)))
    }
}
