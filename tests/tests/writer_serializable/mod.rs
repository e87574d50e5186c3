//! DynamoDB runs transactions serializably; moto's `TransactWriteItems` is not isolated between
//! its server threads (a cancelled transaction restores a table snapshot taken before it started,
//! undoing a concurrent commit). This HTTP client sends one `TransactWriteItems` at a time, which
//! gives the emulator DynamoDB's isolation while reads and the writer's retries stay concurrent.

use std::sync::Arc;

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
    http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use tokio::sync::Mutex;

#[derive(Debug)]
struct OneTransactionAtATime {
    inner: SharedHttpConnector,
    lock: Arc<Mutex<()>>,
}

impl HttpConnector for OneTransactionAtATime {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let inner = self.inner.clone();
        let is_transaction = request
            .headers()
            .get("x-amz-target")
            .is_some_and(|target| target.ends_with(".TransactWriteItems"));
        if !is_transaction {
            return inner.call(request);
        }
        let lock = Arc::clone(&self.lock);
        HttpConnectorFuture::new(async move {
            let _one_at_a_time = lock.lock().await;
            inner.call(request).await
        })
    }
}

pub(crate) fn http_client() -> SharedHttpClient {
    let base = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::AwsLc))
        .build_https();
    let lock = Arc::new(Mutex::new(()));
    http_client_fn(move |settings, components| {
        SharedHttpConnector::new(OneTransactionAtATime {
            inner: base.http_connector(settings, components),
            lock: Arc::clone(&lock),
        })
    })
}
