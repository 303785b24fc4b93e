from configparser import ConfigParser
import setuptools, shlex

# Everything is read from settings.ini, the one place where the package is described (nbdev 2).
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

for o in 'version description keywords author author_email'.split(): assert o in cfg, f'settings.ini is missing `{o}`'

licenses = dict(apache2=('Apache Software License 2.0', 'OSI Approved :: Apache Software License'))
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
lic = licenses[cfg['license']]
min_python = cfg['min_python']

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'],
                 'License :: ' + lic[1],
                 'Natural Language :: ' + cfg['language']] +
                ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['mapg', 'mapg.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require={'dev': dev_requirements,
                    'quant': ['bitsandbytes>=0.50'],      # NF4 4-bit loading
                    'flash': ['flash-attn>=2.6']},        # CUDA only
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': cfg.get('console_scripts', '').split(),
                  'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']},
    **{k: cfg[k] for k in 'version description keywords author author_email'.split()})
