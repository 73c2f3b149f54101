//! `SecretsManagerSecretStore`: the [`SecretStore`] port over AWS Secrets Manager
//! (`GetSecretValue`, the `AWSCURRENT` version).

use aws_smithy_types::error::display::DisplayErrorContext;
use courier_core::ports::{SecretStore, StoreError};

/// Reads secrets from Secrets Manager; the value never appears in an error.
pub struct SecretsManagerSecretStore {
    client: aws_sdk_secretsmanager::Client,
}

impl SecretsManagerSecretStore {
    pub fn new(client: aws_sdk_secretsmanager::Client) -> Self {
        SecretsManagerSecretStore { client }
    }
}

#[async_trait::async_trait]
impl SecretStore for SecretsManagerSecretStore {
    async fn secret_string(&self, id: &str) -> Result<String, StoreError> {
        const OP: &str = "read secret (GetSecretValue)";
        let out = self
            .client
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(|e| StoreError::msg(OP, format!("{id}: {}", DisplayErrorContext(&e))))?;
        out.secret_string
            .ok_or_else(|| StoreError::msg(OP, format!("{id} holds binary, not text")))
    }
}
