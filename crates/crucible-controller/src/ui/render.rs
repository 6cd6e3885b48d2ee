//! How values become HTML: every text escaped; JSON as a tree keeping each value's type;
//! CommonMark with raw HTML shown as text, never passed through; CSV as a table.

use pulldown_cmark::{Event, Options, Parser};
use serde_json::Value;

/// Text escaped for HTML content and attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as a tree: objects and arrays as nested lists (collapsible), scalars marked
/// with their type (`data-type`: string, number, boolean, null), strings quoted.
pub(crate) fn json_tree(v: &Value) -> String {
    let mut out = String::new();
    tree(v, &mut out);
    out
}

fn tree(v: &Value, out: &mut String) {
    let scalar = |ty: &str, text: String| {
        format!(
            "<span class=\"j j-{ty}\" data-type=\"{ty}\">{}</span>",
            esc(&text)
        )
    };
    match v {
        Value::Null => out.push_str(&scalar("null", "null".into())),
        Value::Bool(b) => out.push_str(&scalar("boolean", b.to_string())),
        Value::Number(n) => out.push_str(&scalar("number", n.to_string())),
        Value::String(s) => out.push_str(&scalar("string", Value::String(s.clone()).to_string())),
        Value::Array(items) => {
            out.push_str(&format!(
                "<details open class=\"j-array\" data-type=\"array\"><summary>[{}]</summary><ol start=\"0\">",
                items.len()
            ));
            for item in items {
                out.push_str("<li>");
                tree(item, out);
                out.push_str("</li>");
            }
            out.push_str("</ol></details>");
        }
        Value::Object(map) => {
            out.push_str(&format!(
                "<details open class=\"j-object\" data-type=\"object\"><summary>{{{}}}</summary><ul>",
                map.len()
            ));
            for (k, item) in map {
                out.push_str(&format!("<li><span class=\"j-key\">{}</span>: ", esc(k)));
                tree(item, out);
                out.push_str("</li>");
            }
            out.push_str("</ul></details>");
        }
    }
}

/// CommonMark as HTML. Raw HTML in the source (blocks and inline) is shown as its text, never
/// passed through, so nothing in a review or a Markdown file makes markup of its own; links
/// keep only http(s), mailto and relative targets.
pub(crate) fn markdown(text: &str) -> String {
    let mut options = Options::empty();
    options.insert(Options::ENABLE_TABLES);
    options.insert(Options::ENABLE_STRIKETHROUGH);
    let events = Parser::new_ext(text, options).map(|e| match e {
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(pulldown_cmark::Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) if !safe_url(&dest_url) => Event::Start(pulldown_cmark::Tag::Link {
            link_type,
            dest_url: "#".into(),
            title,
            id,
        }),
        Event::Start(pulldown_cmark::Tag::Image {
            link_type,
            title,
            id,
            ..
        }) => Event::Start(pulldown_cmark::Tag::Image {
            link_type,
            // No request leaves the page for an image a file names.
            dest_url: "#".into(),
            title,
            id,
        }),
        e => e,
    });
    let mut out = String::new();
    pulldown_cmark::html::push_html(&mut out, events);
    out
}

fn safe_url(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((scheme, _)) if !scheme.contains('/') => {
            matches!(scheme, "http" | "https" | "mailto")
        }
        _ => true,
    }
}

/// A CSV document (RFC 4180: quoted fields, doubled quotes, CRLF or LF) as a table, its first
/// row the header; `None` when a quote is left open.
pub(crate) fn csv_table(text: &str) -> Option<String> {
    let rows = csv_rows(text)?;
    let mut out = String::from("<table class=\"csv\">");
    for (i, row) in rows.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for field in row {
            out.push_str(&format!("<{cell}>{}</{cell}>", esc(field)));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    Some(out)
}

fn csv_rows(text: &str) -> Option<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return None;
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    Some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markdown_shows_raw_html_as_text() {
        let html = markdown("# T\n\n<script>alert(1)</script>\n\nx <b>y</b> [a](javascript:alert(1)) ![i](http://x/i.png)");
        assert!(html.contains("<h1>T</h1>"), "{html}");
        assert!(
            !html.contains("<script>") && !html.contains("<b>"),
            "{html}"
        );
        assert!(
            html.contains("&lt;script&gt;") && html.contains("&lt;b&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("javascript:") && !html.contains("http://x/i.png"),
            "{html}"
        );
    }

    #[test]
    fn json_keeps_types_and_escapes() {
        let t = json_tree(&json!({"n": 3, "s": "<3>", "b": true, "z": null, "a": [1.5]}));
        for ty in ["number", "string", "boolean", "null", "array", "object"] {
            assert!(t.contains(&format!("data-type=\"{ty}\"")), "{ty}: {t}");
        }
        assert!(
            t.contains("&quot;&lt;3&gt;&quot;") && !t.contains("<3>"),
            "{t}"
        );
    }

    #[test]
    fn csv_fields_quoted_and_escaped() {
        let t = csv_table("a,b\r\n\"x, y\",\"say \"\"hi\"\"\"\n<i>,2\n").unwrap();
        assert!(t.contains("<th>a</th><th>b</th>"), "{t}");
        assert!(
            t.contains("<td>x, y</td><td>say &quot;hi&quot;</td>"),
            "{t}"
        );
        assert!(t.contains("<td>&lt;i&gt;</td>"), "{t}");
        assert_eq!(csv_table("\"open"), None);
    }
}
