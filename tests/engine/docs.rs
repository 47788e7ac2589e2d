//! docs/decisions.md as short ADRs. Every `## ` section holds three parts, in this order, each
//! exactly once: a paragraph led by `**Context.**`, one led by `**Decision.**` and one led by
//! `**Consequences.**` (a part may go on over further paragraphs until the next lead), and at
//! most 300 words. Words are counted as the whitespace-separated tokens of the section's
//! body: every line after its `## ` heading up to the next `## ` heading, the bold leads and
//! any code block included, the heading itself not. The text before the first section is an
//! introduction, not a section.
//!
//! Every link into the file (`decisions.md` followed by `#` and an anchor) in the
//! repository's Markdown must name a section, by GitHub's anchor rule: the heading's text
//! lowercased, spaces turned into `-`, punctuation other than `-` and `_` removed.

use std::path::{Path, PathBuf};

const PARTS: [&str; 3] = ["**Context.**", "**Decision.**", "**Consequences.**"];
const MAX_WORDS: usize = 300;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The sections of a decisions file: each heading's title and the lines of its body.
fn sections(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if let Some(title) = line.strip_prefix("## ").filter(|_| !fence) {
            out.push((title.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push(line);
        }
    }
    out
}

/// What is wrong with one section's body, if anything.
fn problems(body: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let mut fence = false;
    for line in body {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        let lead = PARTS.iter().position(|p| line.starts_with(p));
        match lead {
            Some(part) if !fence => found.push(part),
            _ => {}
        }
        if !fence && lead.is_none() && line.starts_with("**") && line.contains(".**") {
            let head = line.split(".**").next().unwrap_or_default();
            problems.push(format!(
                "a bold lead that is none of the three parts: {head}.**"
            ));
        }
    }
    if found != [0, 1, 2] {
        let named: Vec<&str> = found.iter().map(|&p| PARTS[p]).collect();
        problems.push(format!(
            "parts {named:?}, not exactly Context, Decision, Consequences in this order"
        ));
    }
    let words: usize = body.iter().map(|l| l.split_whitespace().count()).sum();
    if words > MAX_WORDS {
        problems.push(format!("{words} words, more than {MAX_WORDS}"));
    }
    problems
}

/// GitHub's anchor of a heading.
fn anchor(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The anchors of the links into decisions.md in one text.
fn links(text: &str) -> Vec<String> {
    let target = concat!("decisions.md", "#");
    text.match_indices(target)
        .map(|(at, _)| {
            text[at + target.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                .collect()
        })
        .collect()
}

fn decisions() -> String {
    std::fs::read_to_string(root().join("docs/decisions.md")).unwrap()
}

#[test]
fn every_decision_is_a_short_adr() {
    let text = decisions();
    let sections = sections(&text);
    assert!(
        !sections.is_empty(),
        "docs/decisions.md has no `## ` section"
    );
    let broken: Vec<String> = sections
        .iter()
        .flat_map(|(title, body)| {
            problems(body)
                .into_iter()
                .map(move |p| format!("{title}: {p}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "docs/decisions.md, sections that are not short ADRs (see tests/engine/docs.rs):\n{}",
        broken.join("\n")
    );
    let mut anchors: Vec<String> = sections.iter().map(|(t, _)| anchor(t)).collect();
    anchors.sort();
    let count = anchors.len();
    anchors.dedup();
    assert_eq!(
        anchors.len(),
        count,
        "two sections of docs/decisions.md share an anchor"
    );
}

#[test]
fn every_link_into_the_decisions_names_a_section() {
    let anchors: Vec<String> = sections(&decisions())
        .iter()
        .map(|(t, _)| anchor(t))
        .collect();
    let mut files = Vec::new();
    markdown_files(root(), &mut files);
    let mut dangling = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in links(&text) {
            if !anchors.contains(&link) {
                let shown = file
                    .strip_prefix(root())
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                dangling.push(format!("{shown}: #{link}"));
            }
        }
    }
    assert!(
        dangling.is_empty(),
        "links to no section of docs/decisions.md:\n{}",
        dangling.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    assert_eq!(
        anchor("Declarative configuration: Java only by default"),
        "declarative-configuration-java-only-by-default"
    );
    assert_eq!(anchor("`?timeout=`"), "timeout");
    assert_eq!(
        anchor("Pods admitted without the webhook (missed)"),
        "pods-admitted-without-the-webhook-missed"
    );
    let good = "\n**Context.** a\n\n**Decision.** b\n\nmore\n\n**Consequences.** c\n";
    assert!(problems(&good.lines().collect::<Vec<_>>()).is_empty());
    let swapped = "**Decision.** b\n**Context.** a\n**Consequences.** c\n";
    assert_eq!(problems(&swapped.lines().collect::<Vec<_>>()).len(), 1);
    let missing = "**Context.** a\n**Decision.** b\n";
    assert_eq!(problems(&missing.lines().collect::<Vec<_>>()).len(), 1);
    let long = format!(
        "**Context.** a\n**Decision.** b\n**Consequences.** {}",
        "w ".repeat(298)
    );
    assert_eq!(problems(&long.lines().collect::<Vec<_>>()).len(), 1);
    let text = "# T\nintro\n## A\n```\n## not a heading\n```\n## B\nx";
    let titles: Vec<String> = sections(text).into_iter().map(|(t, _)| t).collect();
    assert_eq!(titles, ["A", "B"]);
    assert_eq!(
        links("see [why](decisions.md#a-b_c). and decisions.md#x"),
        ["a-b_c", "x"]
    );
}
