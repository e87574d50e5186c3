//! docs/configuration.md's reference of every setting is generated from the binaries' clap
//! definitions, so a setting is written once (its doc comment): a flag added, renamed or given
//! another default appears there after `make config-reference`, and this test fails until then.

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

/// The file, and the markers between which its reference is generated (the prose above them is
/// written by hand).
const REFERENCE_FILE: &str = "docs/configuration.md";
const BEGIN: &str = "<!-- BEGIN generated from the clap definitions: make config-reference -->";
const END: &str = "<!-- END generated -->";

/// Set to regenerate the reference instead of checking it (what `make config-reference` does).
const UPDATE: &str = "UPDATE_CONFIG_REFERENCE";

/// How a binary takes its settings.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// Flags, each of which also reads its variable.
    FlagsAndVariables,
    /// Variables only (a Lambda has no command line).
    VariablesOnly,
}

/// Every binary whose settings the reference lists, in the order it lists them.
fn binaries() -> [(Command, Reads); 3] {
    [
        (relay_stream::LambdaEnv::command(), Reads::VariablesOnly),
        (
            relay_stream_local::LocalArgs::command(),
            Reads::FlagsAndVariables,
        ),
        (relay_poller::Cli::command(), Reads::FlagsAndVariables),
    ]
}

/// The generated reference: a section per binary, a table per command.
fn reference() -> String {
    let mut out = String::new();
    for (mut command, reads) in binaries() {
        command.build();
        let _ = writeln!(out, "### `{}`\n", command.get_name());
        write_about(&mut out, &command);
        if command.has_subcommands() {
            let parent = command.get_name().to_owned();
            for sub in command
                .get_subcommands()
                .filter(|sub| sub.get_name() != "help")
            {
                let _ = writeln!(out, "#### `{parent} {}`\n", sub.get_name());
                write_about(&mut out, sub);
                write_settings(&mut out, sub, reads);
            }
        } else {
            write_settings(&mut out, &command, reads);
        }
    }
    out
}

/// What a command is for, from its doc comment or `about`.
fn write_about(out: &mut String, command: &Command) {
    if let Some(about) = command.get_long_about().or_else(|| command.get_about()) {
        let _ = writeln!(out, "{}\n", sentences(&about.to_string()));
    }
}

/// A command's settings as a table.
fn write_settings(out: &mut String, command: &Command, reads: Reads) {
    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !["help", "version"].contains(&arg.get_id().as_str()))
        .filter(|arg| reads == Reads::FlagsAndVariables || arg.get_env().is_some())
        .collect();
    match reads {
        Reads::FlagsAndVariables => {
            out.push_str("| flag | variable | default | meaning |\n|---|---|---|---|\n");
        }
        Reads::VariablesOnly => out.push_str("| variable | default | meaning |\n|---|---|---|\n"),
    }
    for arg in args {
        let variable = arg.get_env().map_or_else(
            || "—".to_owned(),
            |env| format!("`{}`", env.to_string_lossy()),
        );
        let row = [default(arg), meaning(arg)].join(" | ");
        let _ = match reads {
            Reads::FlagsAndVariables => writeln!(out, "| {} | {variable} | {row} |", flag(arg)),
            Reads::VariablesOnly => writeln!(out, "| {variable} | {row} |"),
        };
    }
    out.push('\n');
}

/// `--flag`, with its value names when it takes several (`--key PK SK`); a positional argument
/// by its value name.
fn flag(arg: &Arg) -> String {
    let names: Vec<String> = arg
        .get_value_names()
        .unwrap_or_default()
        .iter()
        .map(ToString::to_string)
        .collect();
    match arg.get_long() {
        Some(long) if names.len() > 1 => format!("`--{long} {}`", names.join(" ")),
        Some(long) => format!("`--{long}`"),
        None => format!("`{}` (positional)", names.join(" ")),
    }
}

/// The default as clap parses it, `required`, or `unset` (the doc comment says what that means).
fn default(arg: &Arg) -> String {
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|value| value.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() {
        format!("`{}`", defaults.join(" "))
    } else if arg.is_required_set() {
        "required".to_owned()
    } else {
        "unset".to_owned()
    }
}

/// The doc comment (all of it), and the accepted values when clap knows them.
fn meaning(arg: &Arg) -> String {
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut text = sentences(&help);
    let values: Vec<String> = if arg.get_action().takes_values() {
        arg.get_possible_values()
            .iter()
            .filter(|value| !value.is_hide_set())
            .map(|value| format!("`{}`", value.get_name()))
            .collect()
    } else {
        Vec::new()
    };
    if !values.is_empty() {
        let _ = write!(text, " One of {}.", values.join(", "));
    }
    text.replace('|', "\\|")
}

/// A doc comment's paragraphs as one line (a table cell), ending as a sentence does: clap drops
/// the full stop of a one-paragraph comment.
fn sentences(text: &str) -> String {
    let mut line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !line.is_empty() && !line.ends_with(['.', '!', '?']) {
        line.push('.');
    }
    line
}

#[test]
fn the_configuration_reference_is_the_clap_definitions() {
    // Given the reference in docs/configuration.md
    let path = outbox_tests::workspace_root().join(REFERENCE_FILE);
    let file = std::fs::read_to_string(&path).unwrap();
    let start = file
        .find(BEGIN)
        .map(|i| i + BEGIN.len())
        .unwrap_or_else(|| {
            panic!("{REFERENCE_FILE} has no line {BEGIN:?} to generate the reference after")
        });
    let end = file[start..]
        .find(END)
        .map(|i| start + i)
        .unwrap_or_else(|| panic!("{REFERENCE_FILE} has no line {END:?} after {BEGIN:?}"));
    let written = &file[start..end];

    // When the reference is generated from what the binaries declare
    let generated = format!("\n\n{}", reference());

    // Then it is what the file says, or the file is rewritten when asked to
    if std::env::var_os(UPDATE).is_some() {
        let updated = format!("{}{generated}{}", &file[..start], &file[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    if written != generated {
        let (was, is): (Vec<&str>, Vec<&str>) =
            (written.lines().collect(), generated.lines().collect());
        let line = (0..was.len().max(is.len()))
            .find(|&i| was.get(i) != is.get(i))
            .unwrap_or(was.len().min(is.len()));
        let (was, is) = (
            was.get(line).copied().unwrap_or("(the end)"),
            is.get(line).copied().unwrap_or("(the end)"),
        );
        panic!(
            "{REFERENCE_FILE} is stale: the settings' clap definitions changed. Regenerate it with \
             `make config-reference`.\nFirst difference, line {} of the generated part:\n  \
             file:      {was}\n  generated: {is}",
            line + 1
        );
    }
}
