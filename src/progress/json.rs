//! What `--json` prints: the final account of a transfer, or the error of a failed run.
//! The field names are a stable interface (README, *JSON summary*).

/// The final account of a transfer, as `--json` prints it. The field names are a
/// stable interface (documented in README).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Report {
    /// Regular files written (new or changed).
    pub files: u64,
    /// Regular files already up to date at the destination.
    pub files_unchanged: u64,
    /// Source bytes read and sent (sender; 0 on the receiving side).
    pub bytes_read: u64,
    /// Bytes of frames on the wire (before TLS).
    pub bytes_wire: u64,
    /// Bytes not sent because the destination already had them.
    pub bytes_skipped: u64,
    /// Bytes written at the destination.
    pub bytes_written: u64,
    /// Entries removed by --delete.
    pub deleted: u64,
    /// Files that could not be read.
    pub failed_files: u64,
    /// Files that kept changing while read.
    pub changed_files: u64,
    /// Connections re-established during the run.
    pub reconnects: u64,
    /// Wall time.
    pub seconds: f64,
    /// A stream's BLAKE3 (hex), checked by both sides; `None` for files.
    pub stream_blake3: Option<String>,
    /// Units sent at each level of the adaptive codec, by the level's name, cheapest
    /// first (sender with `auto` only).
    pub codec_units: Option<Vec<(String, u64)>>,
    /// A chain fan-out (sender): every receiver, in chain order.
    pub replicas: Option<Vec<ReplicaState>>,
    /// The congestion control of the sender's data connections, and why (TCP only).
    pub congestion: Option<(String, String)>,
}

/// One receiver of a chain fan-out, as `--json` names it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaState {
    /// The host (as the user named it, or its ticket's first address).
    pub host: String,
    /// Why it failed, and the exit code that class has; None: complete and durable.
    pub error: Option<(String, i32)>,
}

impl Report {
    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        let json = format!(
            concat!(
                "{{\"files\":{},\"files_unchanged\":{},\"bytes_read\":{},\"bytes_wire\":{},",
                "\"bytes_skipped\":{},\"bytes_written\":{},\"deleted\":{},\"failed_files\":{},",
                "\"changed_files\":{},\"reconnects\":{},\"seconds\":{:.3}}}"
            ),
            self.files,
            self.files_unchanged,
            self.bytes_read,
            self.bytes_wire,
            self.bytes_skipped,
            self.bytes_written,
            self.deleted,
            self.failed_files,
            self.changed_files,
            self.reconnects,
            self.seconds
        );
        let mut json = match &self.stream_blake3 {
            Some(h) => format!("{},\"stream_blake3\":\"{h}\"}}", &json[..json.len() - 1]),
            None => json,
        };
        if let Some((cc, why)) = &self.congestion {
            json.pop();
            json.push_str(&format!(
                ",\"congestion\":{},\"congestion_why\":{}}}",
                json_string(cc),
                json_string(why)
            ));
        }
        if let Some(mix) = &self.codec_units {
            json.pop();
            json.push_str(",\"codec_units\":{");
            for (i, (c, n)) in mix.iter().enumerate() {
                let comma = if i > 0 { "," } else { "" };
                json.push_str(&format!("{comma}\"{c}\":{n}"));
            }
            json.push_str("}}");
        }
        if let Some(reps) = &self.replicas {
            json.pop();
            json.push_str(",\"replicas\":[");
            for (i, r) in reps.iter().enumerate() {
                let comma = if i > 0 { "," } else { "" };
                let state = match &r.error {
                    None => "\"ok\":true".to_string(),
                    Some((m, code)) => format!(
                        "\"ok\":false,\"error\":{},\"exit_code\":{code}",
                        json_string(m)
                    ),
                };
                json.push_str(&format!(
                    "{comma}{{\"host\":{},{state}}}",
                    json_string(&r.host)
                ));
            }
            json.push_str("]}");
        }
        json
    }
}

/// The JSON object `--json` prints when a run fails: what failed and the exit code.
pub fn failure_json(message: &str, code: i32) -> String {
    format!(
        "{{\"error\":{},\"exit_code\":{code}}}",
        json_string(message)
    )
}

/// A run's JSON object `json` (one object, `{…}`) completed with how the run ended: its
/// exit code and, when it did not exit 0, why.
pub fn with_outcome(json: &str, code: i32, error: Option<&str>) -> String {
    let mut out = json.strip_suffix('}').unwrap_or(json).to_string();
    if let Some(e) = error {
        out.push_str(&format!(",\"error\":{}", json_string(e)));
    }
    out.push_str(&format!(",\"exit_code\":{code}}}"));
    out
}

/// `s` as a JSON string literal (quotes, backslashes and control characters escaped).
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_one_object() {
        let r = Report {
            files: 3,
            seconds: 1.5,
            ..Report::default()
        };
        let j = r.to_json();
        assert!(j.starts_with("{\"files\":3,"), "{j}");
        assert!(j.ends_with("\"seconds\":1.500}"), "{j}");
        assert!(!j.contains('\n'));
        let r = Report {
            stream_blake3: Some("ab".repeat(32)),
            ..Report::default()
        };
        let j = r.to_json();
        assert!(
            j.ends_with(&format!("\"stream_blake3\":\"{}\"}}", "ab".repeat(32))),
            "{j}"
        );
    }

    #[test]
    fn json_names_the_congestion_control() {
        let r = Report {
            congestion: Some(("bbr".into(), "haul's choice".into())),
            ..Report::default()
        };
        let j = r.to_json();
        assert!(
            j.ends_with(r#","congestion":"bbr","congestion_why":"haul's choice"}"#),
            "{j}"
        );
    }

    #[test]
    fn json_names_the_codec_levels() {
        let r = Report {
            codec_units: Some(vec![("none".into(), 1), ("zstd:3".into(), 4)]),
            ..Report::default()
        };
        let j = r.to_json();
        assert!(
            j.ends_with("\"codec_units\":{\"none\":1,\"zstd:3\":4}}"),
            "{j}"
        );
    }

    #[test]
    fn json_lists_the_replicas() {
        let r = Report {
            replicas: Some(vec![
                ReplicaState {
                    host: "a:1".into(),
                    error: None,
                },
                ReplicaState {
                    host: "b\n".into(),
                    error: Some(("gone".into(), 5)),
                },
            ]),
            ..Report::default()
        };
        let j = r.to_json();
        assert!(
            j.ends_with(concat!(
                r#""replicas":[{"host":"a:1","ok":true},"#,
                r#"{"host":"b\u000a","ok":false,"error":"gone","exit_code":5}]}"#
            )),
            "{j}"
        );
    }

    #[test]
    fn the_outcome_ends_the_object() {
        assert_eq!(
            with_outcome("{\"files\":1}", 0, None),
            r#"{"files":1,"exit_code":0}"#
        );
        assert_eq!(
            with_outcome("{\"files\":1}", 23, Some("a \"b\"")),
            r#"{"files":1,"error":"a \"b\"","exit_code":23}"#
        );
    }

    #[test]
    fn failure_json_escapes_the_message() {
        assert_eq!(
            failure_json("a \"b\" \\ c\nd", 4),
            r#"{"error":"a \"b\" \\ c\u000ad","exit_code":4}"#
        );
    }
}
