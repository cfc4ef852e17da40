//! The payment webhook's variables, parsed once at startup: `PAYMENT_WEBHOOK_SECRETS`, the
//! payment provider's signing secrets (several while one is rotated; read by
//! `payments::signature`, which verifies with them; held as [`secrecy`] values, never shown),
//! and `PAYMENT_WEBHOOK_MAX_CONCURRENCY`.

use std::fmt;

use clap::Args;
use secrecy::{ExposeSecret, SecretSlice};

use super::SettingsError;

/// The variables as declared (see docs/configuration.md).
#[derive(Args)]
pub(super) struct WebhookEnvironment {
    /// `secret,secret` (each ≥ 16 chars, without `,`; Stripe's `whsec_…` endpoint signing
    /// secrets): a `POST /v1/payments/stripe` delivery is accepted when one of its `v1`
    /// signatures matches one of these — list the new secret beside the old one during a
    /// rotation ([security.md](security.md#secret-rotation), step 4). Unset: that route answers
    /// 404 and no payment event is accepted
    #[arg(long, env = "PAYMENT_WEBHOOK_SECRETS")]
    payment_webhook_secrets: Option<String>,
    /// payment webhook deliveries decided one by one at once (each uses a database connection
    /// while it is), at least 1 and below `DB_MAX_CONNECTIONS`, so a burst of deliveries cannot
    /// take the purchases' connections; one that waits `DB_ACQUIRE_TIMEOUT_MS` for its turn
    /// answers 503 (Stripe retries it). New payments of live holds take no turn: they are paid
    /// many per transaction, on one connection per process
    #[arg(long, env = "PAYMENT_WEBHOOK_MAX_CONCURRENCY", value_parser = super::values::trimmed::<u32>)]
    payment_webhook_max_concurrency: Option<u32>,
}

impl WebhookEnvironment {
    /// The secrets (`None`: the webhook is off) and the deliveries decided at once, checked
    /// against the pool size.
    pub(super) fn check(
        self,
        db_max_connections: u32,
    ) -> Result<(Option<WebhookSecrets>, u32), SettingsError> {
        let secrets = self
            .payment_webhook_secrets
            .as_deref()
            .map(WebhookSecrets::parse)
            .transpose()
            .map_err(|e| SettingsError::Invalid {
                name: "PAYMENT_WEBHOOK_SECRETS",
                reason: e.to_string(),
            })?;
        let turns = self
            .payment_webhook_max_concurrency
            .unwrap_or((db_max_connections / 4).max(1));
        if turns == 0 || (db_max_connections > 1 && turns >= db_max_connections) {
            return Err(SettingsError::Invalid {
                name: "PAYMENT_WEBHOOK_MAX_CONCURRENCY",
                reason: "must be at least 1 and below DB_MAX_CONNECTIONS".into(),
            });
        }
        Ok((secrets, turns))
    }
}

/// Shortest accepted signing secret (Stripe's `whsec_…` secrets are far longer).
pub const MIN_SECRET_LEN: usize = shared::secrets::MIN_SECRET_LEN;

/// The signing secrets currently accepted (`PAYMENT_WEBHOOK_SECRETS`): several while a secret
/// is rotated. At least one. `Debug` shows only how many there are.
#[derive(Clone)]
pub struct WebhookSecrets {
    secrets: Vec<SecretSlice<u8>>,
}

/// Why `PAYMENT_WEBHOOK_SECRETS` is refused. Never carries a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsError {
    #[error("entry {index} must be at least {MIN_SECRET_LEN} characters")]
    TooShort { index: usize },
    #[error("no secret is listed")]
    Empty,
}

impl WebhookSecrets {
    /// Parses `secret1,secret0`: entries separated by `,`, surrounding whitespace ignored, each
    /// at least [`MIN_SECRET_LEN`] bytes. An empty entry (a stray `,`) is refused as too short.
    pub fn parse(list: &str) -> Result<Self, SecretsError> {
        let mut secrets = Vec::new();
        for (i, entry) in list.split(',').map(str::trim).enumerate() {
            if entry.len() < MIN_SECRET_LEN {
                return Err(SecretsError::TooShort { index: i + 1 });
            }
            secrets.push(SecretSlice::from(entry.as_bytes().to_vec()));
        }
        if secrets.is_empty() {
            return Err(SecretsError::Empty);
        }
        Ok(Self { secrets })
    }

    /// Every secret, to verify with (never to be logged).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.secrets.iter().map(|s| s.expose_secret())
    }

    /// How many secrets are accepted.
    pub fn len(&self) -> usize {
        self.secrets.len()
    }

    /// Never true (a configuration has at least one secret); for clippy.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

impl fmt::Debug for WebhookSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WebhookSecrets({} accepted, ***)", self.secrets.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_test_0123456789abcdef";
    const OLD: &str = "whsec_old_fedcba9876543210";

    fn secrets(list: &str) -> WebhookSecrets {
        WebhookSecrets::parse(list).expect("valid secrets")
    }

    #[test]
    fn secrets_are_checked_and_never_shown() {
        assert_eq!(
            WebhookSecrets::parse("short").err(),
            Some(SecretsError::TooShort { index: 1 })
        );
        assert_eq!(
            WebhookSecrets::parse(&format!("{SECRET},")).err(),
            Some(SecretsError::TooShort { index: 2 })
        );
        let s = secrets(&format!(" {SECRET} ,{OLD}"));
        assert_eq!(s.len(), 2);
        let shown = format!("{s:?}");
        assert!(!shown.contains("whsec"), "{shown}");
    }
}
