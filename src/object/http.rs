//! The HTTP client every object-store request goes through, with haul's silence rule
//! (`--timeout`, docs/design.md *Liveness*): a server that takes the connection and then
//! says nothing must not hold a copy forever.
//!
//! - dialling: `connect_timeout`;
//! - sending a body: `TCP_USER_TIMEOUT`, so a server that stops reading (zero window) or
//!   vanishes (no acknowledgement) ends the request; keepalives find a dead peer while
//!   haul waits;
//! - the answer: at most the silence after the last byte of the request was handed to
//!   the connection, and then at most the silence between pieces of the answer's body.
//!
//! reqwest's own `read_timeout` counts from the start of the request, upload included,
//! so it would cut an honest slow upload of a large part; that is why this adapter
//! exists rather than `reqwest::ClientBuilder` settings alone.

use std::str::FromStr;
use std::time::Duration;

use futures_util::StreamExt;
use opendal::raw::{HttpBody, HttpClient, HttpFetch};
use opendal::{Buffer, ErrorKind};

use crate::error::{Error, Result};

/// reqwest with the silence rule around it.
struct Fetcher {
    client: reqwest::Client,
    silence: Option<Duration>,
}

/// The client for a bucket's operator; `silence` None: wait as long as the server takes.
pub fn client(silence: Option<Duration>) -> Result<HttpClient> {
    let mut b = reqwest::Client::builder();
    if let Some(t) = silence {
        b = b
            .connect_timeout(t)
            .tcp_keepalive(Duration::from_secs(5).min(t))
            .tcp_user_timeout(t);
    }
    let client = b.build().map_err(|e| Error::Object {
        message: format!("cannot set up the object store's HTTP client: {e}"),
        code: crate::error::exit::OTHER,
    })?;
    Ok(HttpClient::with(Fetcher { client, silence }))
}

fn failed(what: &'static str, url: &str, temporary: bool) -> opendal::Error {
    opendal::Error::new(ErrorKind::Unexpected, what)
        .with_context("url", url)
        .with_temporary(temporary)
}

fn silent(url: &str, t: Duration) -> opendal::Error {
    opendal::Error::new(
        ErrorKind::Unexpected,
        format!(
            "the server said nothing for {} s (--timeout); is it alive and reachable?",
            t.as_secs()
        ),
    )
    .with_context("url", url)
    .with_temporary(true)
}

impl HttpFetch for Fetcher {
    async fn fetch(&self, req: http::Request<Buffer>) -> opendal::Result<http::Response<HttpBody>> {
        let uri = req.uri().clone();
        let url = uri.to_string();
        let is_head = req.method() == http::Method::HEAD;
        let (parts, body) = req.into_parts();
        let target = reqwest::Url::from_str(&url)
            .map_err(|e| failed("request url is invalid", &url, false).set_source(e))?;
        let mut rb = self
            .client
            .request(parts.method, target)
            .headers(parts.headers)
            .version(parts.version);
        // Told when the connection has taken the body's last piece (or dropped the body).
        let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
        if body.is_empty() {
            drop(sent_tx);
        } else {
            let state = (body, Some(sent_tx));
            let pieces = futures_util::stream::unfold(state, |(mut body, mut tx)| async move {
                match Iterator::next(&mut body) {
                    Some(piece) => Some((Ok::<_, std::io::Error>(piece), (body, tx))),
                    None => {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(());
                        }
                        None
                    }
                }
            });
            rb = rb.body(reqwest::Body::wrap_stream(pieces));
        }
        let silence = self.silence;
        let answer_due = async move {
            let _ = sent_rx.await;
            match silence {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending::<()>().await,
            }
        };
        let mut resp = tokio::select! {
            r = rb.send() => r.map_err(|e| {
                let temporary = e.is_request() || e.is_body() || e.is_connect() || e.is_timeout();
                failed("send http request", &url, temporary).set_source(e)
            })?,
            () = answer_due => return Err(silent(&url, silence.unwrap_or_default())),
        };
        let headers = resp.headers();
        let length = if is_head || headers.contains_key(http::header::CONTENT_ENCODING) {
            None
        } else {
            headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let mut out = http::Response::builder()
            .status(resp.status())
            .version(resp.version())
            .extension(uri);
        if let Some(h) = out.headers_mut() {
            std::mem::swap(h, resp.headers_mut());
        }
        // The URL travels with the stream (for errors), not cloned per piece.
        let state = Some((Box::pin(resp.bytes_stream()), url.clone()));
        let pieces = futures_util::stream::unfold(state, move |s| async move {
            let (mut s, url) = s?;
            loop {
                let next = match silence {
                    Some(t) => match tokio::time::timeout(t, s.next()).await {
                        Ok(n) => n,
                        Err(_) => return Some((Err(silent(&url, t)), None)),
                    },
                    None => s.next().await,
                };
                return match next {
                    Some(Ok(b)) if b.is_empty() => continue,
                    Some(Ok(b)) => Some((Ok(Buffer::from(b)), Some((s, url)))),
                    Some(Err(e)) => {
                        let err = failed("read data from http response", &url, true).set_source(e);
                        Some((Err(err), None))
                    }
                    None => None,
                };
            }
        });
        out.body(HttpBody::new(Box::pin(pieces), length))
            .map_err(|e| failed("build the response", &url, false).set_source(e))
    }
}
