package shared

// ChromiumDisabledFeatures are the Chromium features every browser of a
// screen goes without, whether botd starts it or the desktop machine does
// on a vendor's stock desktop: calls home (MediaRouter, OptimizationHints,
// Translate, AutofillServerCommunication, the CT component updater) and the
// omnibox's WebUI popups, which Chromium 156 preloads at every start (a
// renderer of their own, 40 % of a start's CPU; the omnibox keeps its
// native popup).
const ChromiumDisabledFeatures = "MediaRouter,DialMediaRouteProvider,OptimizationHints,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,WebUIOmniboxPopup,WebUIOmniboxAimPopup"
