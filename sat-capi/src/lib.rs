//! libsat: the C ABI of SAT. Every `extern "C"` function of SAT lives here.
