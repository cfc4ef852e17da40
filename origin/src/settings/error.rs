//! Why the environment does not describe a runnable origin ([`SettingsError`]): the one error of
//! reading the settings at startup; it names the variable, never a secret value.

use shared::SecretsError;

/// Why the environment does not describe a runnable origin.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
    /// TLS is configured, yet this variable would connect in plaintext (or without checking
    /// the server's certificate).
    #[error("environment variable {name} is refused: {reason}")]
    PlaintextRefused { name: &'static str, reason: String },
    #[error("{list} / {single}: {source}")]
    Secrets {
        list: &'static str,
        single: &'static str,
        source: SecretsError,
    },
}
