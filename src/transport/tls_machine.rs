//! [`Machine`]: rustls's unbuffered client and server connections behind one trait, so
//! `tls_stream` drives either the same way and hands either's secrets to `record`.

use std::ops::DerefMut;

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{UnbufferedConnectionCommon, UnbufferedStatus};
use rustls::ExtractedSecrets;

use super::record::Rekey;

/// A rustls connection that runs the unbuffered state machine: client or server.
pub(super) trait Machine:
    DerefMut<Target = UnbufferedConnectionCommon<Self::Side>> + Send
{
    /// rustls's per-side data type.
    type Side;
    /// `process_tls_records` (an inherent method of each side's type in rustls).
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Side>;
    /// The traffic secrets and what derives the next ones (`dangerous_into_kernel_connection`).
    fn into_kernel(self) -> Result<(ExtractedSecrets, Box<dyn Rekey>), rustls::Error>;
}

/// Both sides have the same two inherent methods under the same names.
macro_rules! machine {
    ($conn:ty, $side:ty) => {
        impl Machine for $conn {
            type Side = $side;
            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, Self::Side> {
                self.process_tls_records(incoming)
            }
            fn into_kernel(self) -> Result<(ExtractedSecrets, Box<dyn Rekey>), rustls::Error> {
                let (secrets, kernel) = self.dangerous_into_kernel_connection()?;
                Ok((secrets, Box::new(kernel)))
            }
        }
    };
}

machine!(UnbufferedClientConnection, ClientConnectionData);
machine!(UnbufferedServerConnection, ServerConnectionData);
