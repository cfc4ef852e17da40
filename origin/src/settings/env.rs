//! Reads environment variables through the clap declarations of [`super`], at startup only.
//!
//! Each declared argument names its variable (`env = …`); the values are taken through a lookup
//! function (the process environment, or a map in tests) — never through clap's own read of the
//! process environment — and handed to the same clap parser, so defaults, parsers and errors
//! are the declared ones. An empty value counts as unset. Errors name the variable, never its
//! value's secret parts (secrets are plain strings here and cannot fail to parse). The same
//! declarations render docs/configuration.md's table ([`configuration_table`]).
//!
//! Secrets also come from files, the container and Kubernetes convention: for each variable of
//! [`SECRET_FILES`], `NAME_FILE=/run/secrets/name` gives `NAME` the file's contents (trailing
//! line breaks removed), so a secret need not sit in the process environment. Setting both
//! `NAME` and `NAME_FILE` is an error, as is a file that cannot be read or is empty.

use std::error::Error as _;
use std::fmt::Write as _;
use std::sync::LazyLock;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, Command, FromArgMatches};

use super::declared::Environment;
use super::error::SettingsError;

/// Every declared variable, in declaration order: the names errors quote, and the docs table.
static DECLARED: LazyLock<Command> =
    LazyLock::new(|| Environment::augment_args(Command::new("origin")));

/// The secrets the origin reads, each with the variable that may name a file holding it.
pub const SECRET_FILES: [(&str, &str); 8] = [
    ("DATABASE_URL", "DATABASE_URL_FILE"),
    ("REDIS_URLS", "REDIS_URLS_FILE"),
    ("EDGE_SHARED_SECRETS", "EDGE_SHARED_SECRETS_FILE"),
    ("EDGE_SHARED_SECRET", "EDGE_SHARED_SECRET_FILE"),
    ("ADMIN_TOKENS", "ADMIN_TOKENS_FILE"),
    ("ADMIN_TOKEN", "ADMIN_TOKEN_FILE"),
    ("PAYMENT_WEBHOOK_SECRETS", "PAYMENT_WEBHOOK_SECRETS_FILE"),
    ("LOG_HASH_KEY", "LOG_HASH_KEY_FILE"),
];

/// The value of variable `name` through `get` (empty = unset), or for a secret of
/// [`SECRET_FILES`] the contents of the file its `…_FILE` variable names.
fn value_of(
    get: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<String>, SettingsError> {
    let direct = get(name).filter(|v| !v.is_empty());
    let Some(&(_, file_var)) = SECRET_FILES.iter().find(|(secret, _)| *secret == name) else {
        return Ok(direct);
    };
    let Some(path) = get(file_var).filter(|v| !v.is_empty()) else {
        return Ok(direct);
    };
    let invalid = |reason: String| SettingsError::Invalid {
        name: file_var,
        reason,
    };
    if direct.is_some() {
        return Err(invalid(format!(
            "set either {name} or {file_var}, not both"
        )));
    }
    // The path is not secret; the contents are never shown.
    let bytes = std::fs::read(&path).map_err(|e| invalid(format!("cannot read {path}: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| invalid(format!("{path} is not UTF-8")))?;
    let value = text.trim_end_matches(['\n', '\r']);
    if value.is_empty() {
        return Err(invalid(format!("{path} is empty")));
    }
    Ok(Some(value.to_owned()))
}

/// Parses the variables `T` declares, reading each through `get`.
pub(super) fn parse<T: Args + FromArgMatches>(
    get: &impl Fn(&str) -> Option<String>,
) -> Result<T, SettingsError> {
    let command = T::augment_args(
        Command::new("origin")
            .no_binary_name(true)
            .disable_help_flag(true),
    );
    let mut argv: Vec<String> = Vec::new();
    for arg in command.get_arguments() {
        let (Some(name), Some(long)) = (arg.get_env().and_then(|e| e.to_str()), arg.get_long())
        else {
            continue;
        };
        if let Some(value) = value_of(get, name)? {
            argv.push(format!("--{long}={value}"));
        }
    }
    // The values come from `get` alone, not from what clap read of the process environment.
    let matches = command
        .mut_args(|arg| arg.env(None::<&'static str>))
        .try_get_matches_from(argv)
        .map_err(invalid)?;
    T::from_arg_matches(&matches).map_err(invalid)
}

/// A clap error as the variable it concerns and why (the reason carries no secret: only
/// non-secret variables have parsers that can fail).
fn invalid(error: clap::Error) -> SettingsError {
    let name = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => variable_of(arg),
        _ => None,
    }
    .unwrap_or("(unknown)");
    let reason = match (
        error.kind(),
        error.get(ContextKind::InvalidValue),
        error.get(ContextKind::ValidValue),
    ) {
        (
            ErrorKind::InvalidValue,
            Some(ContextValue::String(got)),
            Some(ContextValue::Strings(valid)),
        ) => format!("expected {}, got {got:?}", valid.join(" or ")),
        _ => error
            .source()
            .map_or_else(|| error.kind().to_string(), ToString::to_string),
    };
    SettingsError::Invalid { name, reason }
}

/// The variable of a clap argument as its errors show it (`--batch-max <BATCH_MAX>`).
fn variable_of(shown: &str) -> Option<&'static str> {
    let long = shown.split([' ', '=']).next()?.strip_prefix("--")?;
    DECLARED
        .get_arguments()
        .find(|arg| arg.get_long() == Some(long))?
        .get_env()?
        .to_str()
}

/// What the table says of a variable without a default value.
fn described_default(name: &str) -> &'static str {
    match name {
        "DATABASE_URL" | "REDIS_URLS" => "required",
        "REDIS_CA_FILE" => "unset (system roots)",
        "EDGE_SHARED_SECRETS" => "this or `EDGE_SHARED_SECRET`",
        "EDGE_SHARED_SECRET" => "this or `EDGE_SHARED_SECRETS`",
        "ADMIN_TOKENS" => "this or `ADMIN_TOKEN`",
        "ADMIN_TOKEN" => "this or `ADMIN_TOKENS`",
        "DB_READ_MAX_CONNECTIONS" => "a quarter of `DB_MAX_CONNECTIONS` (4)",
        "LOG_HASH_KEY" => "random per process",
        "PAYMENT_WEBHOOK_SECRETS" => "unset (the payment webhook is off)",
        "PAYMENT_WEBHOOK_MAX_CONCURRENCY" => "a quarter of `DB_MAX_CONNECTIONS` (4)",
        _ => "unset",
    }
}

/// docs/configuration.md's table of variables, rendered from the declarations.
pub fn configuration_table() -> String {
    let mut table = String::from("| Variable | Default | Meaning |\n|---|---|---|\n");
    for arg in DECLARED.get_arguments() {
        let Some(name) = arg.get_env().and_then(|name| name.to_str()) else {
            continue;
        };
        let default = match arg.get_default_values() {
            [] => described_default(name).to_owned(),
            values => values
                .iter()
                .map(|v| format!("`{}`", v.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let mut meaning = arg.get_help().map(ToString::to_string).unwrap_or_default();
        if let Some((_, file_var)) = SECRET_FILES.iter().find(|(secret, _)| *secret == name) {
            let _ = write!(meaning, ". Or `{file_var}`: a file holding it");
        }
        let _ = writeln!(table, "| `{name}` | {default} | {meaning} |");
    }
    table
}
