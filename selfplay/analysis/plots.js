// Draw every figure of an analysis page (figures-data: {div id: plotly figure}).
(function(){
  const figures = JSON.parse(document.getElementById('figures-data').textContent);
  if (typeof Plotly === 'undefined') {  // the page was moved without plotly.min.js
    for (const id of Object.keys(figures)) {
      document.getElementById(id).textContent =
        'plotly.min.js is missing next to this page: the PNG link below shows this figure.';
    }
    return;
  }
  const jobs = Object.entries(figures).map(([id, fig]) =>
    Plotly.newPlot(id, fig.data, fig.layout, {responsive: true, displaylogo: false}));
  Promise.all(jobs).then(() => { document.body.dataset.plotsRendered = String(jobs.length); });
})();
