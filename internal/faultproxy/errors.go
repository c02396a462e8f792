package faultproxy

import "errors"

// ErrInvalidTarget is wrapped by the errors of Start and SetTarget when the
// target is not host:port with both parts present.
var ErrInvalidTarget = errors.New("faultproxy: invalid target address")

// ErrClosed is returned by SetTarget after Close.
var ErrClosed = errors.New("faultproxy: proxy is closed")
