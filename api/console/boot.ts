// The page's first module: it loads the console (main.ts and every module that imports). Should one of those
// files not load (the browser fails a load it sees the network change under; a platform restarting), none
// of them runs, so this one says so in place of "Loading…" and offers to load the page again.
import('./main.ts').catch(() => {
  const again = document.createElement('button');
  again.type = 'button';
  again.textContent = 'Load again';
  again.addEventListener('click', () => location.reload());
  const message = document.createElement('p');
  message.className = 'error';
  message.setAttribute('role', 'alert');
  message.append('The console did not load: some of its files did not arrive (the network changed, or the platform did not answer). ', again);
  document.getElementById('main')!.replaceChildren(message);
});
