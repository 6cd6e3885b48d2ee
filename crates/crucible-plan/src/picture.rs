//! `plan show --format svg` and the controller's run page: the compiled graph drawn as an SVG picture. layout-rs (a small,
//! dependency-free Sugiyama layout) places the nodes and draws the edges; this module decides
//! what each task and edge looks like. Tasks are coloured by kind, or by their status in a run
//! when one is given; `when` answers, joins, optional edges, mapping and revise loops are
//! labelled; the epilogue is drawn apart, below the main graph.

use crate::{Join, Plan, Status, Task, TaskKind};
use layout::backends::svg::SVGWriter;
use layout::core::base::Orientation;
use layout::core::color::Color;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::{LineStyleKind, StyleAttr};
use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
use layout::topo::layout::VisualGraph;
use std::collections::{BTreeMap, BTreeSet, HashMap};

// layout-rs draws its own connectors at 15px: the same size keeps one font class.
const FONT: usize = 15;
/// Space between the main graph and the epilogue.
const GAP: f64 = 60.;

/// What a task's fill colour says.
pub enum Colouring<'a> {
    /// Its kind.
    Kind,
    /// Its status in a run: settled, by task ([`node_statuses`]), or in flight (`running`, by
    /// node: [`running_nodes`]); a task in neither has not started (pending).
    Run {
        settled: &'a BTreeMap<String, Status>,
        running: &'a BTreeSet<String>,
    },
}

/// How a node stands in a run: in flight, or settled with a status, or neither (pending).
#[derive(Clone, Copy)]
enum RunStatus {
    Running,
    Settled(Status),
}

/// The fill of a task in flight: a blue apart from every settled status and from pending white.
pub const RUNNING_FILL: u32 = 0x74c0fc;

fn kind_fill(k: TaskKind) -> u32 {
    match k {
        TaskKind::Agent => 0xcfe2ff,
        TaskKind::Command => 0xe9ecef,
        TaskKind::Evaluate => 0xfff3bf,
        TaskKind::Route => 0xffd8a8,
        TaskKind::Report => 0xe5dbff,
        TaskKind::TopK | TaskKind::Engine => 0xd3f9d8,
    }
}

fn status_fill(s: Option<RunStatus>) -> u32 {
    let s = match s {
        Some(RunStatus::Running) => return RUNNING_FILL,
        Some(RunStatus::Settled(s)) => Some(s),
        None => None,
    };
    match s {
        Some(Status::Pass) => 0xb2f2bb,
        Some(Status::Fail | Status::Transport) => 0xffa8a8,
        Some(Status::Blocked | Status::Truncated) => 0xffd8a8,
        Some(Status::Skipped | Status::NotTaken) => 0xdee2e6,
        None => 0xffffff,
    }
}

/// Each node's status from a run's rows in the order they settled: a task's own row; for a
/// revise loop the last round's; for a mapped task the worst instance's.
pub fn node_statuses<'a>(
    rows: impl IntoIterator<Item = (&'a str, Status)>,
) -> BTreeMap<String, Status> {
    let rank = |s: Status| match s {
        Status::Pass => 0,
        Status::NotTaken | Status::Skipped => 1,
        Status::Blocked | Status::Truncated => 2,
        Status::Fail | Status::Transport => 3,
    };
    let mut own = BTreeMap::new();
    let mut parts: BTreeMap<String, Status> = BTreeMap::new();
    for (row, status) in rows {
        match row.strip_suffix(']').and_then(|r| r.split_once('[')) {
            Some((node, sub)) if !sub.starts_with("round-") => {
                let worst =
                    parts
                        .get(node)
                        .map_or(status, |&s| if rank(s) > rank(status) { s } else { status });
                parts.insert(node.to_string(), worst);
            }
            Some((node, _)) => {
                parts.insert(node.to_string(), status);
            }
            None => {
                own.insert(row.to_string(), status);
            }
        }
    }
    parts.extend(own);
    parts
}

/// The nodes in flight, from the rows started and not settled (`task`, `task[key]`,
/// `task[round-n]`): a mapped task or a revise loop is running while any of its rows is.
pub fn running_nodes<'a>(rows: impl IntoIterator<Item = &'a str>) -> BTreeSet<String> {
    rows.into_iter()
        .map(|row| {
            row.strip_suffix(']')
                .and_then(|r| r.split_once('['))
                .map_or(row, |(node, _)| node)
                .to_string()
        })
        .collect()
}

fn kind_word(t: &Task) -> String {
    match (t.kind, &t.skill, &t.op) {
        (TaskKind::Agent, Some(_), _) => "skill".into(),
        (TaskKind::Engine, _, Some(op)) => op.clone(),
        (k, _, _) => k.to_string(),
    }
}

/// The node's text: name, kind, how it is mapped or looped, and the dependencies drawn in the
/// other stage (an epilogue task's on the main graph).
fn label(t: &Task, status: Option<RunStatus>, elsewhere: &[&str]) -> String {
    let mut lines = vec![t.name.clone()];
    let mut kind = kind_word(t);
    match status {
        Some(RunStatus::Running) => kind = format!("{kind} · running"),
        Some(RunStatus::Settled(s)) => kind = format!("{kind} · {s}"),
        None => {}
    }
    lines.push(kind);
    if let Some(o) = &t.over {
        lines.push(format!("× {}.{} (≤{})", o.task, o.field, t.max_fanout));
    }
    if !t.revise.is_empty() {
        lines.push(format!("↻ ≤{} rounds", t.max_rounds));
    }
    if !elsewhere.is_empty() {
        lines.push(format!("after {}", elsewhere.join(", ")));
    }
    lines.join("\n")
}

fn attr(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn node(t: &Task, colouring: &Colouring, elsewhere: &[&str]) -> Element {
    let status = match colouring {
        Colouring::Kind => None,
        // In flight wins: a mapped task or a loop with rows settled and one still running is
        // running.
        Colouring::Run { settled, running } => Some(if running.contains(&t.name) {
            Some(RunStatus::Running)
        } else {
            settled.get(&t.name).copied().map(RunStatus::Settled)
        }),
    };
    let fill = match status {
        None => kind_fill(t.kind),
        Some(s) => status_fill(s),
    };
    let text = label(t, status.flatten(), elsewhere);
    let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(1);
    let size = Point::new(
        (widest * FONT * 6 / 10 + 24) as f64,
        (text.lines().count() * (FONT + 4) + 16) as f64,
    );
    // A mapped task's border is thick: it stands for one instance per item.
    let width = if t.over.is_some() { 4 } else { 2 };
    let look = StyleAttr::new(
        Color::fast("black"),
        width,
        Some(Color::new(fill << 8 | 0xff)),
        8,
        FONT,
    );
    let status_attr = match status.flatten() {
        Some(RunStatus::Running) => " data-status=\"running\"".to_string(),
        Some(RunStatus::Settled(s)) => format!(" data-status=\"{s}\""),
        None => String::new(),
    };
    Element::create_with_properties(
        ShapeKind::new_box(&text),
        look,
        Orientation::TopToBottom,
        size,
        format!(
            "class=\"task\" data-task=\"{}\" data-kind=\"{}\" data-stage=\"{}\"{status_attr}",
            attr(&t.name),
            attr(&kind_word(t)),
            t.stage
        ),
    )
}

fn edge(text: &str, style: LineStyleKind, class: &str) -> Arrow {
    let mut look = StyleAttr::simple();
    // One font size for nodes and edges: the writer keeps its font classes in a hash map, so
    // a second size would make the document's byte order vary from run to run.
    look.font_size = FONT;
    let mut a = Arrow::new(
        LineEndKind::None,
        LineEndKind::Arrow,
        style,
        text,
        &look,
        &None,
        &None,
    );
    a.properties = Some(format!("class=\"{class}\""));
    a
}

/// The label of the edge `dep → t`: the `when` answers it carries, and `t`'s join.
fn edge_label(t: &Task, dep: &str) -> String {
    let mut parts = Vec::new();
    if let Some(w) = t.when.as_ref().filter(|w| w.route == dep) {
        parts.push(format!(
            "{}.{} = {}",
            w.route,
            w.question,
            w.answers.join("|")
        ));
    }
    match t.join {
        Join::All => {}
        j @ (Join::Passed | Join::Settled) => parts.push(format!("join {j}")),
    }
    parts.join(", ")
}

/// One stage's tasks laid out; edges from tasks outside it are listed on the node instead.
fn stage_graph(tasks: &[&Task], colouring: &Colouring) -> VisualGraph {
    let mut g = VisualGraph::new(Orientation::TopToBottom);
    let mut handles = HashMap::new();
    for t in tasks {
        let elsewhere: Vec<&str> = t
            .depends_on
            .iter()
            .map(String::as_str)
            .filter(|d| !tasks.iter().any(|o| o.name == *d))
            .collect();
        handles.insert(t.name.as_str(), g.add_node(node(t, colouring, &elsewhere)));
    }
    for t in tasks {
        let to = handles[t.name.as_str()];
        for d in &t.depends_on {
            let Some(&from) = handles.get(d.as_str()) else {
                continue;
            };
            let (style, class) = if t.is_optional_dep(d) {
                (LineStyleKind::Dashed, "edge optional")
            } else {
                (LineStyleKind::Normal, "edge")
            };
            g.add_edge(edge(&edge_label(t, d), style, class), from, to);
        }
        for r in &t.revise {
            if let Some(&back) = handles.get(r.as_str()) {
                let label = format!("revise ≤{}", t.max_rounds);
                g.add_edge(edge(&label, LineStyleKind::Dotted, "edge revise"), to, back);
            }
        }
    }
    g
}

/// Draws onto an SVG writer shifted down by `dy`, and remembers how far down it drew and how
/// far right its edge labels reach (the writer sizes the picture without them).
struct Shifted<'a> {
    out: &'a mut SVGWriter,
    dy: f64,
    bottom: f64,
    right: f64,
}

impl Shifted<'_> {
    fn at(&mut self, p: Point, extent: f64) -> Point {
        self.bottom = self.bottom.max(p.y + self.dy + extent);
        Point::new(p.x, p.y + self.dy)
    }
}

impl RenderBackend for Shifted<'_> {
    fn draw_rect(
        &mut self,
        xy: Point,
        size: Point,
        look: &StyleAttr,
        properties: Option<String>,
        clip: Option<ClipHandle>,
    ) {
        let xy = self.at(xy, size.y);
        self.out.draw_rect(xy, size, look, properties, clip);
    }

    fn draw_line(&mut self, start: Point, stop: Point, look: &StyleAttr, p: Option<String>) {
        let (start, stop) = (self.at(start, 0.), self.at(stop, 0.));
        self.out.draw_line(start, stop, look, p);
    }

    fn draw_circle(&mut self, xy: Point, size: Point, look: &StyleAttr, p: Option<String>) {
        let xy = self.at(xy, size.y / 2.);
        self.out.draw_circle(xy, size, look, p);
    }

    fn draw_text(&mut self, xy: Point, text: &str, look: &StyleAttr) {
        let xy = self.at(xy, 0.);
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
        // Centred on `xy`.
        self.right = self
            .right
            .max(xy.x + (widest * look.font_size) as f64 * 0.3 + 10.);
        self.out.draw_text(xy, text, look);
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        dashed: bool,
        head: (bool, bool),
        look: &StyleAttr,
        properties: Option<String>,
        text: &str,
    ) {
        let path: Vec<(Point, Point)> = path
            .iter()
            .map(|(a, b)| (self.at(*a, 0.), self.at(*b, 0.)))
            .collect();
        let label = (text.chars().count() * look.font_size) as f64 * 0.6;
        for (a, _) in &path {
            self.right = self.right.max(a.x + label / 2. + 10.);
        }
        self.out
            .draw_arrow(&path, dashed, head, look, properties, text);
    }

    fn create_clip(&mut self, xy: Point, size: Point, rounded: usize) -> ClipHandle {
        let xy = self.at(xy, size.y);
        self.out.create_clip(xy, size, rounded)
    }
}

/// The plan as an SVG document.
pub fn svg(plan: &Plan, colouring: &Colouring) -> String {
    let mut out = SVGWriter::new();
    let mut pen = Shifted {
        out: &mut out,
        dy: 0.,
        bottom: 0.,
        right: 0.,
    };
    let main: Vec<&Task> = plan.main_graph().collect();
    if !main.is_empty() {
        stage_graph(&main, colouring).do_it(false, false, false, &mut pen);
    }
    let epilogue: Vec<&Task> = plan.epilogue().collect();
    if !epilogue.is_empty() {
        pen.dy = pen.bottom + GAP;
        let mut look = StyleAttr::simple();
        look.font_size = FONT;
        let title = "epilogue: runs once after the main graph settles";
        let half = (title.len() * FONT) as f64 * 0.3;
        pen.draw_text(Point::new(half + 10., -GAP / 2.), title, &look);
        stage_graph(&epilogue, colouring).do_it(false, false, false, &mut pen);
    }
    let right = pen.right;
    widen(&out.finalize(), right)
}

/// Widens the document's `<svg>` element (its `width` and its viewBox's) to at least `width`.
fn widen(doc: &str, width: f64) -> String {
    // The value after `key`, up to the next `end`, as a byte range.
    let value = |key: &str, end: char| {
        let at = doc.find(key)? + key.len();
        Some((at, at + doc[at..].find(end)?))
    };
    let (Some((w0, w1)), Some((v0, v1))) =
        (value("<svg width=\"", '"'), value(" viewBox=\"0 0 ", ' '))
    else {
        return doc.to_string();
    };
    if doc[w0..w1].parse::<f64>().is_ok_and(|w| w >= width) || v0 < w1 {
        return doc.to_string();
    }
    format!("{}{width}{}{width}{}", &doc[..w0], &doc[w1..v0], &doc[v1..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Stage, When};

    fn plan() -> Plan {
        let mut a = Task::new("a", TaskKind::Command);
        a.emits.insert("xs".into(), crate::FieldType::List);
        let mut gate = Task::new("gate", TaskKind::Route);
        gate.depends_on = vec!["a".into()];
        let mut b = Task::new("b", TaskKind::Agent);
        b.depends_on = vec!["gate".into()];
        b.when = Some(When {
            route: "gate".into(),
            question: "q".into(),
            answers: vec!["yes".into()],
            every_option: false,
        });
        let mut c = Task::new("c", TaskKind::Command);
        c.depends_on = vec!["b".into()];
        c.revise = vec!["b".into()];
        c.max_rounds = 3;
        let mut e = Task::new("e", TaskKind::Report);
        e.stage = Stage::Epilogue;
        e.depends_on = vec!["c".into()];
        Plan {
            version: crate::PLAN_VERSION,
            workflow_type: crate::WorkflowType::Playbook,
            result: None,
            history_record: None,
            params: BTreeMap::new(),
            tasks: vec![a, gate, b, c, e],
        }
    }

    #[test]
    fn tasks_and_labels_are_in_the_document() {
        let doc = svg(&plan(), &Colouring::Kind);
        let xml = roxmltree::Document::parse(&doc).expect("well-formed SVG");
        let tasks: Vec<&str> = xml
            .descendants()
            .filter(|n| n.attribute("class") == Some("task"))
            .filter_map(|n| n.attribute("data-task"))
            .collect();
        assert_eq!(tasks, ["a", "gate", "b", "c", "e"]);
        let text: String = xml
            .descendants()
            .filter(|n| n.is_text())
            .filter_map(|n| n.text())
            .collect();
        assert!(text.contains("gate.q = yes"), "{text}");
        assert!(text.contains("revise ≤3"), "{text}");
        assert!(text.contains("epilogue"), "{text}");
        assert!(text.contains("after c"), "{text}");
    }

    #[test]
    fn a_run_colours_tasks_by_status() {
        let statuses = node_statuses([
            ("a", Status::Pass),
            ("b[round-1]", Status::Fail),
            ("b[round-2]", Status::Pass),
            ("c[x]", Status::Fail),
            ("c[y]", Status::Pass),
            ("gate", Status::Pass),
            ("gate[x]", Status::Fail),
        ]);
        let running = running_nodes(["e", "c[z]"]);
        let doc = svg(
            &plan(),
            &Colouring::Run {
                settled: &statuses,
                running: &running,
            },
        );
        let xml = roxmltree::Document::parse(&doc).expect("well-formed SVG");
        let status = |name: &str| {
            xml.descendants()
                .find(|n| n.attribute("data-task") == Some(name))
                .and_then(|n| n.attribute("data-status"))
        };
        assert_eq!(status("a"), Some("pass"));
        assert_eq!(status("b"), Some("pass"), "the last round decides");
        assert_eq!(
            status("c"),
            Some("running"),
            "an instance in flight outranks the settled ones"
        );
        assert_eq!(status("gate"), Some("pass"), "a task's own row decides");
        assert_eq!(status("e"), Some("running"));
        let pending = svg(
            &plan(),
            &Colouring::Run {
                settled: &statuses,
                running: &BTreeSet::new(),
            },
        );
        let xml = roxmltree::Document::parse(&pending).expect("well-formed SVG");
        let e = xml
            .descendants()
            .find(|n| n.attribute("data-task") == Some("e"))
            .unwrap();
        assert_eq!(e.attribute("data-status"), None, "not started: pending");
        // The running fill is apart from pending (white) and every settled status.
        let fills: BTreeSet<u32> = [None, Some(RunStatus::Running)]
            .into_iter()
            .chain(
                [Status::Pass, Status::Fail, Status::Blocked, Status::Skipped]
                    .map(|s| Some(RunStatus::Settled(s))),
            )
            .map(status_fill)
            .collect();
        assert_eq!(fills.len(), 6);
        assert!(
            doc.contains(&format!("{RUNNING_FILL:06x}")),
            "the fill is drawn"
        );
    }
}
