// Reload the page every N seconds when the console runs with --refresh N,
// unless the person is typing in a form.
(function () {
  var meta = document.querySelector('meta[name="lakemq-refresh"]');
  if (!meta) return;
  var seconds = parseInt(meta.content, 10);
  if (!(seconds > 0)) return;
  setInterval(function () {
    var focused = document.activeElement;
    if (focused && (focused.tagName === "INPUT" || focused.tagName === "SELECT")) return;
    window.location.reload();
  }, seconds * 1000);
})();
