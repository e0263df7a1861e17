//! Pyroscope: each window's processes as pprof, pushed to `/ingest`.
//!
//! In: a [`Recording`]. Out: one `POST /ingest?format=pprof` per process
//! that has samples, the gzip pprof of [`super::pprof`] in a multipart
//! `profile` field (what Pyroscope's ingest API and Grafana Alloy's
//! `pyroscope.receive_http` take). The series name follows Pyroscope's
//! conventions: `<service>.cpu{service_name=…,pid=…,comm=…,container=…,hostname=…}`,
//! where the service is the systemd unit, the container or the program
//! (Pyroscope derives `__name__` = `process_cpu` from the pprof's sample
//! types). Auth: basic (user and password), a bearer token, and the
//! `X-Scope-OrgID` tenant header.

use super::{CgroupIdentity, ExportError, Labels, SendError};
use crate::model::recording::Recording;

/// A Pyroscope server and how to talk to it.
pub struct PyroscopeClient {
    url: String,
    basic: Option<(String, String)>,
    token: Option<String>,
    tenant: Option<String>,
    client: reqwest::blocking::Client,
    labels: Labels,
    /// The window being sent (its start) and the processes of it already
    /// sent: a window retried after a failure halfway sends only the rest.
    progress: Option<(u64, Vec<u32>)>,
}

/// Label values may not hold the characters of the name's syntax.
fn clean(v: &str) -> String {
    v.chars()
        .map(|c| {
            if matches!(c, '{' | '}' | ',' | '=' | '"' | '\n') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

impl PyroscopeClient {
    /// A client for the server at `url`.
    pub fn new(
        url: &str,
        basic: Option<(String, String)>,
        token: Option<String>,
        tenant: Option<String>,
        labels: Labels,
    ) -> Result<PyroscopeClient, ExportError> {
        let client = reqwest::blocking::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .connect_timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(ExportError::HttpClient)?;
        Ok(PyroscopeClient {
            url: url.trim_end_matches('/').to_string(),
            basic,
            token,
            tenant,
            client,
            labels,
            progress: None,
        })
    }

    /// The series name of process `p`.
    pub fn series_name(p: &crate::model::recording::ProcessRecord, labels: &Labels) -> String {
        let service = clean(&super::service_name(p));
        let mut l = vec![format!("service_name={service}")];
        // A folded track (a compacted run's brief processes) has no pid of its own.
        if p.folded == 0 {
            l.push(format!("pid={}", p.pid));
        }
        l.push(format!("comm={}", clean(p.base_name())));
        l.push(format!("hostname={}", clean(&labels.host_name)));
        match super::cgroup_identity(p) {
            Some(CgroupIdentity::Container(id)) => l.push(format!("container={}", clean(&id))),
            Some(CgroupIdentity::Unit(u)) => l.push(format!("unit={}", clean(&u))),
            None => {}
        }
        format!("{service}.cpu{{{}}}", l.join(","))
    }
}

impl super::Exporter for PyroscopeClient {
    fn name(&self) -> &'static str {
        "pyroscope"
    }

    fn send(&mut self, rec: &Recording) -> Result<u64, SendError> {
        let from = (rec.start_wall_ms / 1e3).floor() as u64;
        let until = ((rec.start_wall_ms + rec.end_ns.saturating_sub(rec.start_ns) as f64 / 1e6)
            / 1e3)
            .ceil() as u64;
        let rate = (1000.0 / rec.interval_ms).round() as u64;
        let mut bytes = 0;
        let window = rec.start_wall_ms.to_bits();
        if self.progress.as_ref().is_none_or(|(w, _)| *w != window) {
            self.progress = Some((window, Vec::new()));
        }
        for p in rec
            .processes
            .iter()
            .filter(|p| p.threads.iter().any(|t| !t.samples.time_ns.is_empty()))
        {
            let pid = p.pid;
            if self
                .progress
                .as_ref()
                .is_some_and(|(_, done)| done.contains(&pid))
            {
                continue;
            }
            let start_ns = p.start_ns;
            // Pyroscope makes a series of each label set: not one per goroutine.
            let body = super::pprof::gzip(&super::pprof::build_filtered(
                rec,
                &self.labels,
                &|q| q.pid == pid && q.start_ns == start_ns,
                super::pprof::Goroutines::Left,
            ));
            bytes += body.len() as u64;
            let part = reqwest::blocking::multipart::Part::bytes(body)
                .file_name("profile.pprof")
                .mime_str("application/octet-stream")
                .map_err(|e| SendError::Permanent(e.to_string()))?;
            let form = reqwest::blocking::multipart::Form::new().part("profile", part);
            let name = Self::series_name(p, &self.labels);
            let mut req = self
                .client
                .post(format!("{}/ingest", self.url))
                .query(&[
                    ("name", name.as_str()),
                    ("format", "pprof"),
                    ("spyName", "sysprof"),
                ])
                .query(&[("from", from), ("until", until), ("sampleRate", rate)])
                .multipart(form);
            if let Some((u, pw)) = &self.basic {
                req = req.basic_auth(u, Some(pw));
            }
            if let Some(t) = &self.token {
                req = req.bearer_auth(t);
            }
            if let Some(t) = &self.tenant {
                req = req.header("X-Scope-OrgID", t);
            }
            let resp = req.send().map_err(|e| {
                let message = format!("{}: {}", self.url, e);
                // A request that cannot be built (a bad URL) will not build later;
                // connecting, timing out, a reset: the server may be back.
                if e.is_builder() {
                    SendError::Permanent(message)
                } else {
                    SendError::Transient(message)
                }
            })?;
            if !resp.status().is_success() {
                let status = resp.status();
                // Only the head of the body: its length is the server's say.
                let mut head = Vec::new();
                let _ = std::io::Read::read_to_end(
                    &mut std::io::Read::take(resp, super::error::MAX_ANSWER_READ),
                    &mut head,
                );
                return Err(SendError::http(
                    status.as_u16(),
                    format!(
                        "{} answered {status}: {}",
                        self.url,
                        super::error::answer_text(&String::from_utf8_lossy(&head))
                    ),
                ));
            }
            if let Some((_, done)) = self.progress.as_mut() {
                done.push(pid);
            }
        }
        self.progress = None;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::segment::tests::sample_recording;

    /// Check the series name: the service, then Pyroscope's labels, with
    /// characters of the name's syntax in values replaced.
    #[test]
    fn series_names_follow_pyroscope_conventions() {
        let mut rec = sample_recording(0);
        rec.processes[0].name = "we{ir}d,na=me".into();
        let name = PyroscopeClient::series_name(
            &rec.processes[0],
            &Labels {
                host_name: "h1".into(),
            },
        );
        assert!(
            name.contains("pid=7,comm=we_ir_d_na_me,hostname=h1"),
            "{name}"
        );
        let (service, labels) = name.split_once(".cpu{").unwrap();
        assert!(
            labels.starts_with(&format!("service_name={service},")),
            "{name}"
        );
        assert_eq!(
            labels.matches('{').count() + labels.matches('}').count(),
            1,
            "{name}"
        );
    }
}
