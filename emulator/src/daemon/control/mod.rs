//! Control requests: the verbs clients ask for on the control socket ([`dispatch`]), the
//! queues they create with their rings ([`queues`]), and XRC domains ([`xrc`]).

pub(in crate::daemon) mod dispatch;
pub(in crate::daemon) mod queues;
pub(in crate::daemon) mod xrc;
