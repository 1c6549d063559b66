export { countPromptTokens, PROTOCOLS, timedRequest, type Protocol, type RequestRecord, type Sampling, type Target } from './protocols.ts';
export { fitWords, loadDataset, syntheticPrompts, syntheticText } from './prompts.ts';
export { parseSettings, requestsPerSetting, runBench, settingLabel, type BenchOptions, type BenchResult, type BenchSettingResult, type Setting } from './run.ts';
export { formatTable, percentile, percentiles, summarize, type Percentiles, type SettingSummary } from './stats.ts';
export { plotResults, readResults, renderChart } from './plot.ts';
