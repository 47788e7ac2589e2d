//! The flags reference (`docs/flags.md`), written from the command line's own definition:
//! every subcommand, its flags by heading, their environment variables, defaults and help
//! text, exactly as `--help` has them. A unit test fails when the file differs; `just
//! flags-doc` writes it again.

use clap::{Arg, Command, CommandFactory};

use super::Cli;

/// One line of help text: paragraphs joined, pipes escaped for a Markdown table.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn flag(arg: &Arg) -> String {
    let name = match (arg.get_long(), arg.get_short()) {
        (Some(l), Some(s)) => format!("`-{s}`, `--{l}`"),
        (Some(l), None) => format!("`--{l}`"),
        (None, _) => format!("`{}`", arg.get_id().as_str().to_uppercase()),
    };
    let values: Vec<String> = arg
        .get_value_names()
        .into_iter()
        .flatten()
        .map(|v| v.to_string())
        .collect();
    let takes_value = arg.get_num_args().is_some_and(|n| n.takes_values());
    if arg.get_long().is_some() && takes_value && !values.is_empty() {
        format!("{name} `{}`", values.join(" "))
    } else {
        name
    }
}

fn row(arg: &Arg) -> String {
    let env = arg
        .get_env()
        .map(|e| format!("`{}`", e.to_string_lossy()))
        .unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let default = if defaults.is_empty() {
        String::new()
    } else {
        format!("`{}`", defaults.join(","))
    };
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| one_line(&h.to_string()))
        .unwrap_or_default();
    format!("| {} | {env} | {default} | {help} |\n", flag(arg))
}

fn command(out: &mut String, cmd: &Command) {
    out.push_str(&format!("## `otel-injector {}`\n\n", cmd.get_name()));
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        out.push_str(&format!("{}\n\n", one_line(&about.to_string())));
    }
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    // Headings in the order their first flag appears; flags without one first.
    let mut headings: Vec<Option<&str>> = Vec::new();
    for a in &args {
        if !headings.contains(&a.get_help_heading()) {
            headings.push(a.get_help_heading());
        }
    }
    headings.sort_by_key(|h| h.is_some());
    for heading in headings {
        if let Some(h) = heading {
            out.push_str(&format!("### {h}\n\n"));
        }
        out.push_str("| flag | environment | default | what |\n|---|---|---|---|\n");
        for a in args.iter().filter(|a| a.get_help_heading() == heading) {
            out.push_str(&row(a));
        }
        out.push('\n');
    }
}

/// The whole reference, as `docs/flags.md` holds it.
pub fn markdown() -> String {
    let cli = Cli::command();
    let mut out = String::from(
        "# Flags\n\n\
         Every flag of every command, as `otel-injector <command> --help` prints it; every \
         flag can also be set by its environment variable. Generated from the command line's \
         definition (`just flags-doc`); a unit test fails when this file differs.\n\n",
    );
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        command(&mut out, sub);
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/flags.md");

    /// `OTEL_INJECTOR_WRITE_FLAGS_DOC=1` writes the file instead (`just flags-doc`).
    #[test]
    fn the_flags_reference_is_what_help_says() {
        let want = markdown();
        if std::env::var_os("OTEL_INJECTOR_WRITE_FLAGS_DOC").is_some() {
            std::fs::write(DOC, &want).unwrap();
        }
        let have = std::fs::read_to_string(DOC).unwrap_or_default();
        assert!(
            have == want,
            "docs/flags.md differs from --help: run `just flags-doc`"
        );
    }

    #[test]
    fn every_serve_flag_has_a_row_with_its_environment_variable() {
        let doc = markdown();
        let serve = Cli::command();
        let serve = serve.find_subcommand("serve").unwrap();
        for a in serve.get_arguments().filter(|a| a.get_long().is_some()) {
            if matches!(a.get_id().as_str(), "help" | "version") || a.is_hide_set() {
                continue;
            }
            let long = a.get_long().unwrap();
            let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
            let line = doc
                .lines()
                .find(|l| l.starts_with(&format!("| `--{long}`")))
                .unwrap_or_else(|| panic!("--{long} has no row"));
            if let Some(env) = env {
                assert!(line.contains(&format!("`{env}`")), "{line}");
            }
        }
    }
}
