//! The options of `copy` whose source or destination is an object store (`s3://`).

use clap::Args;

/// Options of a copy to or from `s3://bucket/prefix` (credentials never come from here:
/// the environment and `~/.aws/credentials`, as the AWS CLI reads them).
#[derive(Debug, Args)]
pub struct ObjectArgs {
    /// An S3-compatible store to use instead of AWS (e.g. http://127.0.0.1:9000);
    /// default: $AWS_ENDPOINT_URL, else AWS's own for $AWS_REGION.
    #[arg(long, value_name = "URL", help_heading = "Remote")]
    pub s3_endpoint: Option<String>,
}
