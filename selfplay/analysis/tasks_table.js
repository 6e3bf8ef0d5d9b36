// The task table of an analysis page: filter by text, sort by a column, page through.
(function(){
  const data = JSON.parse(document.getElementById('tasks-data').textContent);
  const cols = data.columns, rows = data.rows;
  const table = document.getElementById('tasks'), body = table.querySelector('tbody');
  const search = document.getElementById('task-search'), count = document.getElementById('task-count');
  const more = document.getElementById('task-more');
  let shown = 200, sortCol = null, sortDir = 1, view = rows;
  function cell(v){ return v === null || v === undefined ? '' : (typeof v === 'number' ? (Number.isInteger(v) ? String(v) : v.toFixed(3)) : String(v)); }
  function apply(){
    const needle = search.value.toLowerCase();
    view = needle ? rows.filter(r => r.some(v => cell(v).toLowerCase().includes(needle))) : rows.slice();
    if (sortCol !== null) view.sort((a, b) => {
      const x = a[sortCol], y = b[sortCol];
      if (x === y) return 0; if (x === null) return 1; if (y === null) return -1;
      return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * sortDir;
    });
    render();
  }
  function render(){
    body.textContent = '';
    for (const r of view.slice(0, shown)) {
      const tr = document.createElement('tr');
      r.forEach((v, i) => { const td = document.createElement('td'); td.textContent = cell(v);
        if (cols[i] === 'question' || cols[i] === 'answer') td.className = 'q'; tr.appendChild(td); });
      body.appendChild(tr);
    }
    count.textContent = 'showing ' + Math.min(shown, view.length) + ' of ' + view.length + ' (' + rows.length + ' in all)';
    more.style.display = view.length > shown ? '' : 'none';
  }
  table.querySelectorAll('th').forEach((th, i) => th.addEventListener('click', () => {
    sortDir = sortCol === i ? -sortDir : 1; sortCol = i;
    table.querySelectorAll('th').forEach(h => h.textContent = h.dataset.name);
    th.textContent = th.dataset.name + (sortDir > 0 ? ' ▲' : ' ▼'); apply(); }));
  search.addEventListener('input', () => { shown = 200; apply(); });
  more.addEventListener('click', () => { shown += 500; render(); });
  apply();
})();
