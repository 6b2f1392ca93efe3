//! rsync's include/exclude rules (`--exclude`, `--include`, `--exclude-from`,
//! `--include-from`), parsed and matched without I/O. The sender's walk asks
//! [`Filter::excluded`] before it sends a name; with `--delete` the same rules travel to the
//! receiver (`Control::Protect`), which keeps an excluded destination entry as rsync does
//! without `--delete-excluded`.
//!
//! The rules, as rsync's man page ("INCLUDE/EXCLUDE PATTERN RULES") and its `exclude.c`
//! apply them to a path relative to the transfer root: the first matching rule decides;
//! no match means included. A leading `/` anchors a pattern at the root; a pattern with a
//! `/` elsewhere (trailing one aside) or `**` is matched against the whole path, which
//! for an unanchored pattern without `**` means its last components at any depth
//! (`foo/bar` matches `x/foo/bar`), and a pattern with neither against the last
//! component. A pattern starting with `**` is matched against `/` + the path, so `**/x`
//! also matches a top-level `x`. A trailing `/` matches directories only; a pattern ending
//! in `***` matches a directory as `name/`, so `dir/***` matches `dir` and all below.
//! `*` does not cross `/`, `**` does, `?` is one character but `/`, `[...]` a class (`!`
//! or `^` negates, `a-z` ranges, `[:alpha:]` and the other POSIX names, ASCII only), `\`
//! escapes in a wildcard pattern; an unclosed `[`, an unknown `[:name:]` or a trailing
//! `\` makes rsync's wildmatch abort, so such a rule matches nothing. `+ ` and `- ` before
//! a pattern make it an include or an exclude, as rsync reads them. The property test
//! `tests/e2e_parity_wildmatch.rs` holds all this against rsync itself.
//!
//! Not here: merge files, `:` dir-merge, modifiers (`s`, `r`, `p`, `x`...), `!` (clear),
//! `--filter`, `-F`, `--cvs-exclude`. Matching is a table walk, O(pattern × path): a
//! hostile pattern cannot make it exponential.

use serde::{Deserialize, Serialize};

/// Most rules accepted from a peer.
pub const MAX_RULES: usize = 100_000;
/// Longest pattern accepted.
pub const MAX_PATTERN: usize = 4096;

/// One rule as the user wrote it: include or exclude, and the pattern.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterRule {
    /// `--include` (else `--exclude`).
    pub include: bool,
    /// The pattern, raw bytes.
    pub pattern: Vec<u8>,
}

impl FilterRule {
    /// The rule for `pattern` given to `--exclude` (`include` false) or `--include`, or
    /// read from an `-from` file: a leading `+ ` or `- ` overrides the sign, as in rsync.
    /// `None` for a blank pattern.
    pub fn parse(pattern: &[u8], include: bool) -> Option<FilterRule> {
        let (include, pattern) = match pattern {
            [b'+', b' ', rest @ ..] => (true, rest),
            [b'-', b' ', rest @ ..] => (false, rest),
            p => (include, p),
        };
        (!pattern.is_empty()).then(|| FilterRule {
            include,
            pattern: pattern.to_vec(),
        })
    }
}

/// An ordered rule list; empty: everything is included.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<FilterRule>", into = "Vec<FilterRule>")]
pub struct Filter {
    rules: Vec<Compiled>,
}

impl From<Vec<FilterRule>> for Filter {
    /// Compiles the rules; from a peer, rules beyond [`MAX_RULES`] and patterns longer
    /// than [`MAX_PATTERN`] are dropped (a local list is checked in `config`).
    fn from(rules: Vec<FilterRule>) -> Filter {
        Filter {
            rules: rules
                .into_iter()
                .take(MAX_RULES)
                .filter(|r| r.pattern.len() <= MAX_PATTERN && !r.pattern.is_empty())
                .map(Compiled::new)
                .collect(),
        }
    }
}

impl From<Filter> for Vec<FilterRule> {
    fn from(f: Filter) -> Vec<FilterRule> {
        f.rules.into_iter().map(|c| c.rule).collect()
    }
}

impl Filter {
    /// One rule that excludes every path: sent as `Protect` when the sender could not read
    /// all of its source, so that `--delete` removes nothing (rsync: "IO error encountered
    /// -- skipping file deletion"): what it could not read may still be at the destination.
    pub fn everything() -> Filter {
        Filter::from(vec![FilterRule {
            include: false,
            pattern: b"**".to_vec(),
        }])
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `path` (relative to the transfer root, `/`-separated, no leading `/`) is
    /// excluded: the first rule that matches decides. The root itself never is.
    pub fn excluded(&self, path: &[u8], is_dir: bool) -> bool {
        if path.is_empty() {
            return false;
        }
        self.rules
            .iter()
            .find(|r| r.matches(path, is_dir))
            .is_some_and(|r| !r.rule.include)
    }
}

/// A rule with its pattern taken apart as rsync's `add_rule` does.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Compiled {
    rule: FilterRule,
    tokens: Vec<Token>,
    /// Malformed for rsync's wildmatch (an unclosed `[`, an unknown `[:name:]`, a
    /// trailing `\`): it aborts every match, so the rule matches nothing.
    never: bool,
    anchored: bool,
    dir_only: bool,
    /// Slashes in the pattern (the trailing one aside).
    slashes: usize,
    /// Contains `**` (and so is a wildcard pattern).
    wild2: bool,
    /// Starts with `**`: matched against `/` + the path, so `**/x` finds a top-level `x`.
    wild2_prefix: bool,
    /// Ends with `***`: a directory is matched as `name/`, so `dir/***` matches `dir`.
    wild3_suffix: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Byte(u8),
    /// `?`
    One,
    /// `*`
    Star,
    /// `**` (or more stars)
    StarStar,
    /// `[...]`: its members and whether negated.
    Class(Vec<Member>, bool),
}

/// One member of a `[...]` class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Member {
    /// A byte range, inclusive (a single byte: both ends alike).
    Range(u8, u8),
    /// `[:name:]`, ASCII only as in rsync's wildmatch.
    Posix(Posix),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Posix {
    Alnum,
    Alpha,
    Blank,
    Cntrl,
    Digit,
    Graph,
    Lower,
    Print,
    Punct,
    Space,
    Upper,
    Xdigit,
}

impl Posix {
    fn named(name: &[u8]) -> Option<Posix> {
        Some(match name {
            b"alnum" => Posix::Alnum,
            b"alpha" => Posix::Alpha,
            b"blank" => Posix::Blank,
            b"cntrl" => Posix::Cntrl,
            b"digit" => Posix::Digit,
            b"graph" => Posix::Graph,
            b"lower" => Posix::Lower,
            b"print" => Posix::Print,
            b"punct" => Posix::Punct,
            b"space" => Posix::Space,
            b"upper" => Posix::Upper,
            b"xdigit" => Posix::Xdigit,
            _ => return None,
        })
    }

    fn has(self, c: u8) -> bool {
        match self {
            Posix::Alnum => c.is_ascii_alphanumeric(),
            Posix::Alpha => c.is_ascii_alphabetic(),
            Posix::Blank => c == b' ' || c == b'\t',
            Posix::Cntrl => c.is_ascii_control(),
            Posix::Digit => c.is_ascii_digit(),
            Posix::Graph => c.is_ascii_graphic(),
            Posix::Lower => c.is_ascii_lowercase(),
            Posix::Print => c.is_ascii_graphic() || c == b' ',
            Posix::Punct => c.is_ascii_punctuation(),
            Posix::Space => matches!(c, b' ' | b'\t'..=b'\r'),
            Posix::Upper => c.is_ascii_uppercase(),
            Posix::Xdigit => c.is_ascii_hexdigit(),
        }
    }
}

impl Member {
    fn has(self, c: u8) -> bool {
        match self {
            Member::Range(lo, hi) => lo <= c && c <= hi,
            Member::Posix(p) => p.has(c),
        }
    }
}

impl Compiled {
    fn new(rule: FilterRule) -> Compiled {
        let mut p: &[u8] = &rule.pattern;
        let mut dir_only = false;
        if p.len() > 1 && p.ends_with(b"/") {
            p = &p[..p.len() - 1];
            dir_only = true;
        }
        let slashes = p.iter().filter(|&&b| b == b'/').count();
        let wild = p.iter().any(|b| matches!(b, b'*' | b'?' | b'['));
        let star2 = p.windows(2).position(|w| w == b"**");
        let wild2 = wild && star2.is_some();
        let wild2_prefix = star2 == Some(0);
        let wild3_suffix = wild2 && p.ends_with(b"***");
        let anchored = p.starts_with(b"/");
        if anchored {
            p = &p[1..];
        }
        let (tokens, never) = match wild {
            true => match tokenize(p) {
                Some(t) => (t, false),
                None => (Vec::new(), true),
            },
            false => (p.iter().map(|&b| Token::Byte(b)).collect(), false),
        };
        Compiled {
            rule,
            tokens,
            never,
            anchored,
            dir_only,
            slashes,
            wild2,
            wild2_prefix,
            wild3_suffix,
        }
    }

    /// rsync's `rule_matches` (exclude.c) over `wildmatch_array` (wildmatch.c): the
    /// strings rsync matches one after the other are joined here into one text.
    fn matches(&self, path: &[u8], is_dir: bool) -> bool {
        if self.never || (self.dir_only && !is_dir) {
            return false;
        }
        let mut name = path;
        if self.slashes == 0 && !self.wild2 {
            if let Some(i) = path.iter().rposition(|&b| b == b'/') {
                name = &path[i + 1..];
            }
        }
        let mut text = Vec::with_capacity(name.len() + 2);
        if self.wild2_prefix {
            text.push(b'/');
        }
        text.extend_from_slice(name);
        if is_dir && self.wild3_suffix {
            text.push(b'/');
        }
        if !self.anchored && self.slashes > 0 && !self.wild2 {
            // The last `slashes + 1` components, if there are that many.
            let cuts: Vec<usize> = (0..text.len()).filter(|&i| text[i] == b'/').collect();
            let start = match cuts.len() {
                n if n > self.slashes => cuts[n - self.slashes - 1] + 1,
                n if n == self.slashes => 0,
                _ => return false,
            };
            return glob(&self.tokens, &text[start..]);
        }
        if !self.anchored && self.wild2 && !self.wild2_prefix {
            // At the start, or after any slash.
            return glob(&self.tokens, &text)
                || text
                    .iter()
                    .enumerate()
                    .filter(|&(_, &b)| b == b'/')
                    .any(|(i, _)| glob(&self.tokens, &text[i + 1..]));
        }
        glob(&self.tokens, &text)
    }
}

/// A wildcard pattern's tokens, or `None` where rsync's wildmatch aborts.
fn tokenize(p: &[u8]) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => {
                out.push(Token::Byte(*p.get(i + 1)?));
                i += 2;
            }
            b'?' => {
                out.push(Token::One);
                i += 1;
            }
            b'*' => {
                let n = p[i..].iter().take_while(|&&b| b == b'*').count();
                out.push(if n > 1 { Token::StarStar } else { Token::Star });
                i += n;
            }
            b'[' => {
                let (tok, used) = class(&p[i + 1..])?;
                out.push(tok);
                i += 1 + used;
            }
            b => {
                out.push(Token::Byte(b));
                i += 1;
            }
        }
    }
    Some(out)
}

/// Parses a class after its `[` as rsync's `dowild` reads one: the token and how many
/// bytes it used (through `]`), or `None` where it is not closed or names an unknown
/// `[:class:]`. A `]` first is a member; `-` between two members is a range (not after
/// a range or a `[:class:]`, not before `]`); `\` escapes.
fn class(p: &[u8]) -> Option<(Token, usize)> {
    let mut i = 0;
    let negated = matches!(p.first(), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut members = Vec::new();
    // The member before, for a range; 0: none (rsync's `prev_ch`).
    let mut prev = 0u8;
    loop {
        let c = *p.get(i)?;
        if c == 0 {
            return None;
        }
        if c == b'\\' {
            i += 1;
            let e = *p.get(i)?;
            members.push(Member::Range(e, e));
            prev = e;
        } else if c == b'-' && prev != 0 && p.get(i + 1).is_some_and(|&n| n != b']') {
            i += 1;
            let mut end = p[i];
            if end == b'\\' {
                i += 1;
                end = *p.get(i)?;
            }
            members.push(Member::Range(prev, end));
            prev = 0;
        } else if c == b'[' && p.get(i + 1) == Some(&b':') {
            let s = i + 2;
            let close = s + p[s..].iter().position(|&b| b == b']')?;
            if close > s && p[close - 1] == b':' {
                members.push(Member::Posix(Posix::named(&p[s..close - 1])?));
                prev = 0;
                i = close;
            } else {
                // No `:]`: the `[` is a member like any other.
                members.push(Member::Range(b'[', b'['));
                prev = b'[';
            }
        } else {
            members.push(Member::Range(c, c));
            prev = c;
        }
        i += 1;
        if p.get(i) == Some(&b']') {
            return Some((Token::Class(members, negated), i + 1));
        }
    }
}

/// Whether `tokens` match all of `text`: a table over pattern positions, one text byte at
/// a time.
fn glob(tokens: &[Token], text: &[u8]) -> bool {
    // live[k]: the first k tokens match the text read so far.
    let n = tokens.len();
    let mut live = vec![false; n + 1];
    live[0] = true;
    close_stars(tokens, &mut live);
    for &c in text {
        let mut next = vec![false; n + 1];
        for k in 0..n {
            if !live[k] {
                continue;
            }
            match &tokens[k] {
                Token::Byte(b) if *b == c => next[k + 1] = true,
                Token::One if c != b'/' => next[k + 1] = true,
                Token::Class(m, neg) if c != b'/' && m.iter().any(|m| m.has(c)) != *neg => {
                    next[k + 1] = true
                }
                // A star stays where it is while it eats a byte.
                Token::Star if c != b'/' => next[k] = true,
                Token::StarStar => next[k] = true,
                _ => {}
            }
        }
        close_stars(tokens, &mut next);
        if !next.iter().any(|&x| x) {
            return false;
        }
        live = next;
    }
    live[n]
}

/// Stars also match nothing: a live star makes the position after it live.
fn close_stars(tokens: &[Token], live: &mut [bool]) {
    for k in 0..tokens.len() {
        if live[k] && matches!(tokens[k], Token::Star | Token::StarStar) {
            live[k + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rules: &[(&str, bool)]) -> Filter {
        rules
            .iter()
            .filter_map(|(p, inc)| FilterRule::parse(p.as_bytes(), *inc))
            .collect::<Vec<_>>()
            .into()
    }

    fn ex(rules: &[&str], path: &str, dir: bool) -> bool {
        f(&rules.iter().map(|r| (*r, false)).collect::<Vec<_>>()).excluded(path.as_bytes(), dir)
    }

    #[test]
    fn plain_name_matches_last_component_at_any_depth() {
        assert!(ex(&["postmaster.pid"], "postmaster.pid", false));
        assert!(ex(&["postmaster.pid"], "data/postmaster.pid", false));
        assert!(!ex(&["postmaster.pid"], "data/postmaster.pid.old", false));
        assert!(!ex(&["pid"], "data/postmaster.pid", false));
    }

    #[test]
    fn everything_excludes_every_path() {
        let all = Filter::everything();
        for (path, dir) in [
            ("a", false),
            ("a", true),
            ("x/y/z", false),
            (".hidden/b c", true),
        ] {
            assert!(all.excluded(path.as_bytes(), dir), "{path}");
        }
        assert!(!all.excluded(b"", true), "the root itself never is");
    }

    #[test]
    fn leading_slash_anchors() {
        assert!(ex(&["/a"], "a", false));
        assert!(!ex(&["/a"], "x/a", false));
        assert!(ex(&["/x/a"], "x/a", false));
        assert!(ex(&["/x/*"], "x/a", true));
    }

    #[test]
    fn infix_slash_matches_trailing_components() {
        // rsync: `foo/bar` excludes x/foo/bar as well (checked against rsync 3).
        assert!(ex(&["foo/bar"], "foo/bar", true));
        assert!(ex(&["foo/bar"], "x/foo/bar", true));
        assert!(!ex(&["foo/bar"], "xfoo/bar", true));
        assert!(!ex(&["foo/bar"], "bar", true));
        assert!(ex(&["pg_replslot/*"], "data/pg_replslot/slot1", true));
        assert!(!ex(&["pg_replslot/*"], "data/pg_replslot", true));
        assert!(!ex(&["pg_replslot/*"], "data/pg_replslot/a/b", false));
    }

    #[test]
    fn stars_and_classes() {
        assert!(ex(&["*.log"], "a/b/c.log", false));
        assert!(!ex(&["/*.log"], "a/c.log", false));
        assert!(ex(&["/**.log"], "a/c.log", false));
        assert!(ex(&["a/**/c"], "a/b/x/c", false));
        assert!(!ex(&["a/**/c"], "a/c", false));
        assert!(ex(&["a/**/c"], "z/a/b/c", false));
        assert!(ex(&["file?.txt"], "file1.txt", false));
        assert!(!ex(&["file?.txt"], "file12.txt", false));
        assert!(ex(&["[ab]*"], "d/bx", false));
        assert!(!ex(&["[!ab]*"], "d/bx", false));
        assert!(ex(&["[a-c]x"], "bx", false));
        assert!(ex(&["\\*"], "*", false));
        assert!(!ex(&["\\*x?"], "ax1", false));
    }

    #[test]
    fn a_leading_double_star_matches_at_the_top_as_in_rsync() {
        // rsync matches a `**` prefix against `/` + the path (issue 39, item 1).
        assert!(ex(&["**/bar"], "bar", true));
        assert!(ex(&["**/bar"], "x/y/bar", false));
        assert!(ex(&["**/bar/**"], "bar/f", false));
        assert!(!ex(&["/**/bar"], "bar", true));
        assert!(!ex(&["**?bar"], "bar", false));
    }

    #[test]
    fn classes_and_malformed_patterns_as_rsync_s_wildmatch() {
        assert!(ex(&["x[[:digit:]]"], "x1", false));
        assert!(!ex(&["x[[:digit:]]"], "xa", false));
        assert!(ex(&["[[:upper:][:punct:]]*"], "d/Foo", false));
        assert!(ex(&["[]b]"], "]", false));
        assert!(ex(&["[!]]"], "a", false));
        assert!(ex(&["[a-]"], "-", false));
        assert!(ex(&["[[:a]"], ":", false));
        // rsync's wildmatch aborts on these: the rule matches nothing.
        assert!(!ex(&["[a"], "[a", false));
        assert!(!ex(&["*[[:nope:]]"], "x", false));
        assert!(!ex(&["a*\\"], "a\\", false));
    }

    #[test]
    fn trailing_slash_is_directories_only() {
        assert!(ex(&["lost+found/"], "lost+found", true));
        assert!(!ex(&["lost+found/"], "lost+found", false));
        assert!(ex(&["cache/***"], "x/cache", true));
        assert!(!ex(&["/cache/***"], "x/cache", true));
        assert!(ex(&["/cache/***"], "cache", true));
        assert!(ex(&["/cache/***"], "cache/a/b", false));
    }

    #[test]
    fn first_match_wins() {
        let r = f(&[("*/", true), ("*.conf", true), ("*", false)]);
        assert!(!r.excluded(b"etc", true));
        assert!(!r.excluded(b"etc/a.conf", false));
        assert!(r.excluded(b"etc/a.txt", false));
        let r = f(&[("keep.log", true), ("*.log", false)]);
        assert!(!r.excluded(b"d/keep.log", false));
        assert!(r.excluded(b"d/other.log", false));
        assert!(!r.excluded(b"", true));
    }

    #[test]
    fn prefixes_and_round_trip() {
        let r = f(&[("+ *.c", false), ("- *", true)]);
        assert!(!r.excluded(b"a.c", false));
        assert!(r.excluded(b"a.h", false));
        let bytes = postcard::to_stdvec(&r).unwrap();
        let back: Filter = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn hostile_patterns_stay_polynomial() {
        let p = "*a".repeat(200) + "b";
        let t = "a".repeat(3000);
        assert!(!ex(&[&p], &t, false));
    }
}
